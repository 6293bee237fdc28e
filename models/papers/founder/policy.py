"""Goal-conditioned actor-critic learned in imagination, and its test in the real gridworld.

Behaviour learning follows DreamerV3's shape at toy scale: from world-model states of the offline
data, roll the prior forward ``horizon`` steps with actions from the actor pi(a | z, z_g); score each
imagined state with the reward (-D(z, z_g) for FOUNDER, cos(z, z_g) for the baseline); the critic
V(z, z_g) regresses the lambda-returns; the actor follows REINFORCE with the return-minus-value
advantage (normalised per batch) and an entropy bonus (DreamerV3 uses REINFORCE for discrete actions).
Goals are z_g = Q(e_g) of view-B embeddings of random free cells. No gradient flows through the
world model. Evaluation: the actor (sampling) acts in the real grid from its view-A observations
filtered by the world model, the goal given only as a view-B embedding; success = reaching the goal
cell within ``max_steps``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edgesmith.models.papers.founder.config import PolicyConfig
from edgesmith.models.papers.founder.env import N_ACTIONS, GridWorld
from edgesmith.models.papers.founder.grounding import cosine_reward


class ActorCritic(nn.Module):
    def __init__(self, z_dim: int, hidden: int):
        super().__init__()
        mk = lambda n_out: nn.Sequential(nn.Linear(2 * z_dim, hidden), nn.ELU(), nn.Linear(hidden, hidden),  # noqa: E731
                                         nn.ELU(), nn.Linear(hidden, n_out))
        self.actor, self.critic = mk(N_ACTIONS), mk(1)

    def logits(self, z, zg):
        return self.actor(torch.cat([z, zg], dim=-1))

    def value(self, z, zg):
        return self.critic(torch.cat([z, zg], dim=-1))


def reward_fn(kind: str, distance):
    if kind == "temporal":
        return lambda z, zg: -distance(z, zg)
    return cosine_reward


def lambda_returns(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """rewards (H, B), values (H + 1, B) -> returns (H, B), bootstrapped from the last value."""
    ret, out = values[-1], []
    for t in reversed(range(rewards.shape[0])):
        ret = rewards[t] + gamma * ((1 - lam) * values[t + 1] + lam * ret)
        out.append(ret)
    return torch.stack(out[::-1])


def train_policy(rssm, distance, start_z: torch.Tensor, goal_z: torch.Tensor, cfg: PolicyConfig, seed: int,
                 progress=None) -> ActorCritic:
    """start_z: (N, z_dim) world-model states; goal_z: (M, z_dim) mapped goal states."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        ac = ActorCritic(start_z.shape[-1], cfg.hidden)
        opt = torch.optim.Adam(ac.parameters(), lr=cfg.lr)
        reward = reward_fn(cfg.reward, distance)
        for _ in range(cfg.updates):
            z = start_z[torch.randint(len(start_z), (cfg.batch,), generator=gen)]
            zg = goal_z[torch.randint(len(goal_z), (cfg.batch,), generator=gen)]
            states, actions = [z], []
            with torch.no_grad():
                for _ in range(cfg.horizon):
                    probs = torch.softmax(ac.logits(z, zg), dim=-1)
                    a = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                    z = rssm.imagine_step(z, a)
                    states.append(z), actions.append(a)
                zs = torch.stack(states)  # (H + 1, B, z)
                zgs = zg.expand(len(zs), *zg.shape)
                rewards = reward(zs[1:], zgs[1:]).squeeze(-1)
                targets = lambda_returns(rewards, ac.value(zs, zgs).squeeze(-1), cfg.gamma, cfg.lam)
            values = ac.value(zs[:-1], zgs[:-1]).squeeze(-1)
            logp_all = torch.log_softmax(ac.logits(zs[:-1], zgs[:-1]), dim=-1)
            logp = logp_all.gather(-1, torch.stack(actions).unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            adv = (targets - values).detach()
            adv = adv / (adv.std() + 1e-6)
            loss = (0.5 * (values - targets) ** 2).mean() - (logp * adv).mean() - cfg.entropy * entropy.mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(ac.parameters(), 10.0)
            opt.step()
            if progress is not None:
                progress()
    finally:
        torch.set_num_threads(threads)
    return ac.eval()


def episode_tasks(world: GridWorld, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n (start, goal) pairs of distinct free cells."""
    cells = np.array(world.cells)
    starts, goals = [], []
    while len(starts) < n:
        i, j = rng.integers(len(cells), size=2)
        if i != j:
            starts.append(cells[i]), goals.append(cells[j])
    return np.array(starts), np.array(goals)


@torch.no_grad()
def run_episodes(world: GridWorld, rssm, mapping, ac: ActorCritic | None, starts, goals, goal_emb, max_steps: int,
                 seed: int) -> dict:
    """Act in the real grid (all episodes in parallel); ac None: uniformly random actions."""
    gen = torch.Generator().manual_seed(seed)
    pos = starts.copy()
    zg = mapping.state(torch.from_numpy(goal_emb))
    z = rssm.filter_step(None, None, torch.from_numpy(world.view_a(pos)))
    reached = np.all(pos == goals, axis=1)
    steps = np.where(reached, 0, max_steps + 1)
    for t in range(1, max_steps + 1):
        if ac is None:
            a = torch.randint(N_ACTIONS, (len(pos),), generator=gen)
        else:
            a = torch.multinomial(torch.softmax(ac.logits(z, zg), dim=-1), 1, generator=gen).squeeze(-1)
        pos = np.array([world.step(p, int(ai)) for p, ai in zip(pos, a)])
        z = rssm.filter_step(z, a, torch.from_numpy(world.view_a(pos)))
        now = np.all(pos == goals, axis=1) & ~reached
        steps[now] = t
        reached |= now
    return {"success": float(reached.mean()), "mean_steps_when_reached": float(steps[reached].mean()) if reached.any()
            else None, "episodes": int(len(pos))}
