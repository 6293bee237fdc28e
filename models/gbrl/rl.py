"""PPO and A2C with tree-ensemble (GBRL) or MLP actor-critics, on gymnasium environments.

    algo = PPO("CartPole-v1", policy="tree", seed=0)        # stable-baselines3-like
    algo.learn(total_timesteps=200_000)
    algo.evaluate(n_episodes=10)                              # mean return of the greedy policy

A tree policy learns the way GBRL does: the RL loss is computed in torch on the ensemble's outputs
(a leaf tensor), its gradient w.r.t. those outputs (times the minibatch size, i.e. per-sample
gradients) is handed to ``GBTEnsemble.fit_step``, and each minibatch step adds one tree. Within an
update the outputs of the whole rollout buffer are kept current by adding only the newest tree's
contribution, so an update costs O(trees added), not O(ensemble size). The MLP policy runs the
same algorithm with Adam, as the baseline. Actor-critic: ``shared`` (one ensemble, logits + value,
per-output learning rates) or separate actor and critic ensembles. Actions: categorical (Discrete)
or Gaussian with a state-independent learned log-std (Box).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from edgesmith.common import EdgesmithError, seed_everything
from edgesmith.models.gbrl.ensemble import GBTEnsemble


# --- policies ---------------------------------------------------------------------------------------


class TreeActorCritic:
    """Policy outputs (logits or Gaussian mean) and a value from GBT ensembles."""

    kind = "tree"

    def __init__(self, obs_dim: int, action_dim: int, gaussian: bool = False, shared: bool = True,
                 policy_lr: float = 0.05, value_lr: float = 0.05, log_std_init: float = 0.0, log_std_lr: float = 3e-3,
                 tree: dict | None = None):
        tree = {"max_depth": 4, "n_bins": 256, "split_score": "cosine", "grow_policy": "oblivious", **(tree or {})}
        self.obs_dim, self.action_dim, self.gaussian, self.shared = obs_dim, action_dim, gaussian, shared
        if shared:
            self.ensembles = [GBTEnsemble(obs_dim, action_dim + 1, lr=[policy_lr] * action_dim + [value_lr], **tree)]
        else:
            self.ensembles = [GBTEnsemble(obs_dim, action_dim, lr=policy_lr, **tree),
                              GBTEnsemble(obs_dim, 1, lr=value_lr, **tree)]
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init))) if gaussian else None
        self._std_opt = torch.optim.Adam([self.log_std], lr=log_std_lr) if gaussian else None

    @property
    def n_trees(self) -> int:
        return sum(e.n_trees for e in self.ensembles)

    def _split(self, outs: list[np.ndarray]):
        if self.shared:
            return outs[0][:, : self.action_dim], outs[0][:, self.action_dim]
        return outs[0], outs[1][:, 0]

    def predict(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._split([e.predict(obs) for e in self.ensembles])

    def policy_ensemble(self) -> GBTEnsemble:
        """The ensemble mapping observations to policy outputs only (what gets exported)."""
        e = self.ensembles[0]
        return e.select_outputs(np.arange(self.action_dim)) if self.shared else e

    def begin_update(self, obs: np.ndarray) -> None:
        self._obs = np.ascontiguousarray(obs, dtype=np.float32)
        self._cache = [e.predict(self._obs).astype(np.float64) for e in self.ensembles]

    def outputs(self, idx: np.ndarray):
        self._leaf = [torch.tensor(c[idx], dtype=torch.float32, requires_grad=True) for c in self._cache]
        pi, v = self._split(self._leaf)
        return pi, v

    def step(self, idx: np.ndarray, loss: torch.Tensor) -> None:
        if self._std_opt is not None:
            self._std_opt.zero_grad()
        loss.backward()
        x = self._obs[idx]
        for e, leaf, cache in zip(self.ensembles, self._leaf, self._cache):
            if leaf.grad is None:  # the loss does not use these outputs (e.g. vf_coef=0): no tree
                continue
            e.fit_step(x, leaf.grad.numpy() * len(idx))  # per-sample gradients, as GBRL takes them
            cache -= e.lr.astype(np.float64) * e.leaf_sums(self._obs, e.n_trees - 1)
        if self._std_opt is not None:
            self._std_opt.step()


class MLPActorCritic(nn.Module):
    """The baseline: separate tanh MLPs for policy and value (SB3's default shape), trained with Adam."""

    kind = "mlp"

    def __init__(self, obs_dim: int, action_dim: int, gaussian: bool = False, hidden: int = 64, lr: float = 3e-4,
                 max_grad_norm: float = 0.5, log_std_init: float = 0.0):
        super().__init__()
        self.action_dim, self.gaussian, self.max_grad_norm = action_dim, gaussian, max_grad_norm

        def mlp(out):
            return nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, out))

        self.pi, self.v = mlp(action_dim), mlp(1)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init))) if gaussian else None
        self.opt = torch.optim.Adam(self.parameters(), lr=lr, eps=1e-5)

    @torch.no_grad()
    def predict(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = torch.as_tensor(np.asarray(obs, np.float32))
        return self.pi(x).numpy(), self.v(x)[:, 0].numpy()

    def begin_update(self, obs: np.ndarray) -> None:
        self._obs = torch.as_tensor(np.asarray(obs, np.float32))

    def outputs(self, idx: np.ndarray):
        x = self._obs[torch.as_tensor(idx)]
        return self.pi(x), self.v(x)[:, 0]

    def step(self, idx: np.ndarray, loss: torch.Tensor) -> None:
        self.opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.parameters(), self.max_grad_norm)
        self.opt.step()


def _dist(policy, pi: torch.Tensor):
    if policy.gaussian:
        return torch.distributions.Normal(pi, policy.log_std.exp().expand_as(pi))
    return torch.distributions.Categorical(logits=pi)


# --- algorithms ----------------------------------------------------------------------------------------


@dataclass
class PPOConfig:
    """PPO settings (SB3 names). A2C uses the same fields with ``n_epochs=1`` and one full batch."""

    n_envs: int = 8
    n_steps: int = 256
    batch_size: int = 512
    n_epochs: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    normalize_advantage: bool = True
    policy_kwargs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class PPO:
    """Proximal policy optimisation with a ``"tree"`` (GBRL) or ``"mlp"`` actor-critic."""

    algo = "ppo"

    def __init__(self, env_id: str, policy: str = "tree", seed: int = 0, config: PPOConfig | None = None,
                 env_kwargs: dict | None = None, obs_wrapper=None):
        import gymnasium as gym

        self.env_id, self.seed, self.cfg = env_id, seed, config or PPOConfig()
        self.env_kwargs = env_kwargs or {}
        self.obs_wrapper = obs_wrapper if obs_wrapper is not None else obs_wrapper_for(env_id)
        self.rng = seed_everything(seed)
        self.envs = [self._make_env() for _ in range(self.cfg.n_envs)]
        space = self.envs[0].action_space
        self.gaussian = isinstance(space, gym.spaces.Box)
        if not self.gaussian and not isinstance(space, gym.spaces.Discrete):
            raise EdgesmithError(f"{env_id} has a {type(space).__name__} action space.",
                                 "use an environment with Discrete or Box actions.")
        self.action_dim = int(space.shape[0]) if self.gaussian else int(space.n)
        self.low, self.high = (space.low, space.high) if self.gaussian else (None, None)
        obs_dim = int(np.prod(self.envs[0].observation_space.shape))
        kw = {"gaussian": self.gaussian, **self.cfg.policy_kwargs}
        if policy == "tree":
            self.policy = TreeActorCritic(obs_dim, self.action_dim, **kw)
        elif policy == "mlp":
            self.policy = MLPActorCritic(obs_dim, self.action_dim, **kw)
        else:
            raise EdgesmithError(f"unknown policy {policy!r}.", "use 'tree' or 'mlp'.")
        self.num_timesteps = 0
        self.history: list[tuple[int, float]] = []  # (timesteps, mean return of episodes finished since last)
        self._obs = np.stack([self._reset(e, seed + 1000 * i) for i, e in enumerate(self.envs)])
        self._ep_ret = np.zeros(self.cfg.n_envs)

    # --- environment helpers ---------------------------------------------------------------------
    def _make_env(self):
        import gymnasium as gym

        env = gym.make(self.env_id, **self.env_kwargs)
        return self.obs_wrapper(env) if self.obs_wrapper else env

    @staticmethod
    def _reset(env, seed=None):
        obs, _ = env.reset(seed=seed)
        return np.asarray(obs, np.float32).ravel()

    def _sample(self, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.gaussian:
            std = np.exp(self.policy.log_std.detach().numpy())
            a = pi + std * self.rng.standard_normal(pi.shape)
            logp = (-0.5 * ((a - pi) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(axis=1)
            return a.astype(np.float32), logp
        z = pi - pi.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        a = (p.cumsum(axis=1) > self.rng.random((len(p), 1))).argmax(axis=1)
        return a, np.log(p[np.arange(len(a)), a] + 1e-12)

    def _env_action(self, a):
        return np.clip(a, self.low, self.high) if self.gaussian else int(a)

    # --- rollout and update ----------------------------------------------------------------------------
    def _rollout(self):
        c, E, S = self.cfg, self.cfg.n_envs, self.cfg.n_steps
        obs_b = np.zeros((S, E, self._obs.shape[1]), np.float32)
        act_b = np.zeros((S, E) + ((self.action_dim,) if self.gaussian else ()), np.float32 if self.gaussian else np.int64)
        logp_b, val_b, rew_b, done_b = (np.zeros((S, E)) for _ in range(4))
        finished = []
        for t in range(S):
            pi, v = self.policy.predict(self._obs)
            a, logp = self._sample(pi)
            obs_b[t], act_b[t], logp_b[t], val_b[t] = self._obs, a, logp, v
            for i, env in enumerate(self.envs):
                o, r, term, trunc, _ = env.step(self._env_action(a[i]))
                o = np.asarray(o, np.float32).ravel()
                self._ep_ret[i] += r
                if trunc and not term:  # time limit: bootstrap from the state the episode was cut at
                    r += c.gamma * float(self.policy.predict(o[None])[1][0])
                rew_b[t, i] = r
                if term or trunc:
                    done_b[t, i] = 1.0
                    finished.append(self._ep_ret[i])
                    self._ep_ret[i] = 0.0
                    o = self._reset(env)
                self._obs[i] = o
        last_v = self.policy.predict(self._obs)[1]
        adv = np.zeros((S, E))
        gae = np.zeros(E)
        for t in reversed(range(S)):
            nxt = last_v if t == S - 1 else val_b[t + 1]
            delta = rew_b[t] + c.gamma * nxt * (1 - done_b[t]) - val_b[t]
            gae = delta + c.gamma * c.gae_lambda * (1 - done_b[t]) * gae
            adv[t] = gae
        self.num_timesteps += S * E
        flat = lambda a: a.reshape((S * E,) + a.shape[2:])  # noqa: E731
        return flat(obs_b), flat(act_b), flat(logp_b), flat(adv), flat(adv + val_b), finished

    def _loss(self, idx, act, logp_old, adv, ret):
        c = self.cfg
        pi, v = self.policy.outputs(idx)
        dist = _dist(self.policy, pi)
        a = torch.as_tensor(act[idx])
        logp = dist.log_prob(a).sum(-1) if self.policy.gaussian else dist.log_prob(a)
        A = torch.as_tensor(adv[idx], dtype=torch.float32)
        if c.normalize_advantage and len(idx) > 1:
            A = (A - A.mean()) / (A.std() + 1e-8)
        ratio = torch.exp(logp - torch.as_tensor(logp_old[idx], dtype=torch.float32))
        pg = -torch.min(ratio * A, torch.clamp(ratio, 1 - c.clip_range, 1 + c.clip_range) * A).mean()
        vf = torch.nn.functional.mse_loss(v, torch.as_tensor(ret[idx], dtype=torch.float32))
        ent = dist.entropy()
        ent = (ent.sum(-1) if self.policy.gaussian else ent).mean()
        return pg + c.vf_coef * vf - c.ent_coef * ent

    def _update(self, obs, act, logp_old, adv, ret) -> None:
        c = self.cfg
        self.policy.begin_update(obs)
        n = len(obs)
        for _ in range(c.n_epochs):
            perm = self.rng.permutation(n)
            for s in range(0, n, c.batch_size):
                idx = perm[s : s + c.batch_size]
                self.policy.step(idx, self._loss(idx, act, logp_old, adv, ret))

    def learn(self, total_timesteps: int, callback=None) -> "PPO":
        """Train until ``total_timesteps`` more environment steps were taken; ``callback(self)`` per rollout."""
        target = self.num_timesteps + int(total_timesteps)
        while self.num_timesteps < target:
            obs, act, logp, adv, ret, finished = self._rollout()
            if finished:
                self.history.append((self.num_timesteps, float(np.mean(finished))))
            self._update(obs, act, logp, adv, ret)
            if callback is not None and callback(self) is False:
                break
        return self

    # --- use -------------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray) -> np.ndarray:
        """Greedy actions (argmax / mean) for a batch of observations."""
        pi, _ = self.policy.predict(np.asarray(obs, np.float32).reshape(len(obs), -1))
        return pi if self.gaussian else pi.argmax(axis=1)

    def predict(self, obs: np.ndarray, deterministic: bool = True):
        """SB3's signature: ``(actions, None)`` for a batch (or one) observation."""
        obs = np.asarray(obs, np.float32)
        batch = obs.reshape(-1, self._obs.shape[1])
        if deterministic:
            a = self.act(batch)
        else:
            a = self._sample(self.policy.predict(batch)[0])[0]
        return (a if obs.ndim > 1 else a[0]), None

    def evaluate(self, n_episodes: int = 10, seed: int = 10_000) -> float:
        return evaluate_policy(lambda o: self.act(o), self._make_env, n_episodes, seed, self.gaussian,
                               (self.low, self.high))


class A2C(PPO):
    """Advantage actor-critic: one gradient step (one tree) per rollout on the whole batch, no clipping."""

    algo = "a2c"

    def __init__(self, env_id: str, policy: str = "tree", seed: int = 0, config: PPOConfig | None = None, **kw):
        cfg = config or PPOConfig(n_envs=8, n_steps=16, normalize_advantage=False)
        cfg.n_epochs, cfg.batch_size = 1, cfg.n_envs * cfg.n_steps
        super().__init__(env_id, policy, seed, cfg, **kw)

    def _loss(self, idx, act, logp_old, adv, ret):
        c = self.cfg
        pi, v = self.policy.outputs(idx)
        dist = _dist(self.policy, pi)
        a = torch.as_tensor(act[idx])
        logp = dist.log_prob(a).sum(-1) if self.policy.gaussian else dist.log_prob(a)
        A = torch.as_tensor(adv[idx], dtype=torch.float32)
        if c.normalize_advantage:
            A = (A - A.mean()) / (A.std() + 1e-8)
        vf = torch.nn.functional.mse_loss(v, torch.as_tensor(ret[idx], dtype=torch.float32))
        ent = dist.entropy()
        ent = (ent.sum(-1) if self.policy.gaussian else ent).mean()
        return -(logp * A).mean() + c.vf_coef * vf - c.ent_coef * ent


def minigrid_flat_image(env):
    """MiniGrid observations as the flattened 7x7x3 egocentric grid (147 small integers).

    Trees split on these categorical-like codes directly; the view turns with the agent, so it
    also carries the heading.
    """
    import minigrid  # noqa: F401  (registers the MiniGrid environments)
    from gymnasium.wrappers import FlattenObservation
    from minigrid.wrappers import ImgObsWrapper

    return FlattenObservation(ImgObsWrapper(env))


def obs_wrapper_for(env_id: str):
    """The observation wrapper an environment needs (MiniGrid: ``minigrid_flat_image``), or None."""
    if env_id.startswith("MiniGrid"):
        import minigrid  # noqa: F401

        return minigrid_flat_image
    return None


def evaluate_policy(act_fn, make_env, n_episodes: int = 10, seed: int = 10_000, gaussian: bool = False,
                    bounds=(None, None)) -> float:
    """Mean undiscounted return of ``act_fn`` (batch of observations -> actions) over seeded episodes."""
    returns = []
    for ep in range(n_episodes):
        env = make_env()
        obs, _ = env.reset(seed=seed + ep)
        total, done = 0.0, False
        while not done:
            a = np.asarray(act_fn(np.asarray(obs, np.float32).reshape(1, -1)))[0]
            a = np.clip(a, *bounds) if gaussian else int(a)
            obs, r, term, trunc, _ = env.step(a)
            total += float(r)
            done = term or trunc
        env.close()
        returns.append(total)
    return float(np.mean(returns))
