"""Grounding view B in the world model's states, the temporal-distance head, and the reward.

* ``Mapping`` Q(z | e): from a view-B embedding e to world-model features z = [h, s]. Its loss is
  KL[Q(s | e) || q(s | h, o)] (the world model's posterior, held fixed) + -ln P(e | z) (a unit-variance
  Gaussian decoder of e from a sample of Q), as in the notes' reading of the paper. h is deterministic
  in the world model; Q predicts it with a unit-variance Gaussian whose KL to a point mass's Gaussian
  of the same variance is 0.5 ||h_Q - h||^2, the term used for it (the project's choice: the paper's
  exact treatment of h is unconfirmed). The goal state is z_g = mean of Q(. | e_g).
* ``TemporalDistance`` D(z_a, z_b) in [0, 1] (sigmoid): regressed (MSE) to c / T for pairs c steps
  apart on one trajectory of T steps and to 1 for pairs from different trajectories. Reward
  r = -D(z_t, z_g).
* ``RewardHead``: the exported part. Input [e_t, e_g] packed in one row; output -D(Q(e_t), Q(e_g)).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.founder.world_model import gaussian_kl


class Mapping(nn.Module):
    def __init__(self, emb_dim: int, h_dim: int, s_dim: int, hidden: int):
        super().__init__()
        self.h_dim, self.s_dim = h_dim, s_dim
        self.net = nn.Sequential(nn.Linear(emb_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, h_dim + 2 * s_dim))
        self.decoder = nn.Sequential(nn.Linear(h_dim + s_dim, hidden), nn.ReLU(), nn.Linear(hidden, emb_dim))

    def forward(self, e: torch.Tensor):
        out = self.net(e)
        h = out[:, : self.h_dim]
        mu = out[:, self.h_dim: self.h_dim + self.s_dim]
        logstd = out[:, self.h_dim + self.s_dim:].clamp(-5.0, 2.0)
        return h, mu, logstd

    def state(self, e: torch.Tensor) -> torch.Tensor:
        """The mean state z = [h, mu] of Q(. | e)."""
        h, mu, _ = self(e)
        return torch.cat([h, mu], dim=-1)

    def loss(self, e, h_target, post_mu, post_logstd) -> torch.Tensor:
        h, mu, logstd = self(e)
        kl = gaussian_kl(mu, logstd, post_mu, post_logstd).mean() + 0.5 * ((h - h_target) ** 2).sum(-1).mean()
        s = mu + torch.exp(logstd) * torch.randn_like(mu)
        recon = 0.5 * ((self.decoder(torch.cat([h, s], dim=-1)) - e) ** 2).sum(-1).mean()
        return kl + recon


class TemporalDistance(nn.Module):
    def __init__(self, z_dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * z_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, za: torch.Tensor, zb: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(torch.cat([za, zb], dim=-1)))


class RewardHead(nn.Module):
    """[e_t, e_g] (batch, 2 * emb_dim) -> reward -D(Q(e_t), Q(e_g)) (batch, 1)."""

    def __init__(self, mapping: Mapping, distance: TemporalDistance, emb_dim: int):
        super().__init__()
        self.mapping, self.distance, self.emb_dim = mapping, distance, emb_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        zt = self.mapping.state(x[:, : self.emb_dim])
        zg = self.mapping.state(x[:, self.emb_dim:])
        return -self.distance(zt, zg)


def temporal_pairs(n_traj: int, length: int, n: int, neg_frac: float, rng: np.random.Generator):
    """Index pairs and targets for D: (traj_a, t_a, traj_b, t_b, target), trajectories of ``length`` steps.

    Same-trajectory pairs take t_a uniform and c uniform in [0, length - t_a], target c / length;
    a ``neg_frac`` share pairs two different trajectories, target 1.
    """
    if n_traj < 2 and neg_frac > 0:
        raise EdgesmithError("different-trajectory pairs need at least two trajectories.",
                             "collect more trajectories or set neg_frac to 0.")
    ta = rng.integers(0, length + 1, n)
    c = np.floor(rng.random(n) * (length - ta + 1)).astype(np.int64)
    tra = rng.integers(0, n_traj, n)
    trb, tb, target = tra.copy(), ta + c, c / length
    neg = rng.random(n) < neg_frac
    if neg.any():
        trb[neg] = (tra[neg] + rng.integers(1, n_traj, int(neg.sum()))) % n_traj
        tb[neg] = rng.integers(0, length + 1, int(neg.sum()))
        target[neg] = 1.0
    return tra, ta, trb, tb, target.astype(np.float32)


def cosine_reward(z: torch.Tensor, zg: torch.Tensor) -> torch.Tensor:
    """The baseline reward: cosine similarity of the states, (batch, 1)."""
    return F.cosine_similarity(z, zg, dim=-1, eps=1e-6).unsqueeze(-1)


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties); 0 when either side is constant."""
    from scipy.stats import rankdata

    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape or a.size < 2:
        raise EdgesmithError(f"spearman needs two equal-length series of 2+ values, got {a.size} and {b.size}.",
                             "pass one value per pair on both sides.")
    ra, rb = rankdata(a) - (a.size + 1) / 2, rankdata(b) - (b.size + 1) / 2
    denom = np.sqrt((ra ** 2).sum() * (rb ** 2).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else 0.0


def train_mapping(mapping: Mapping, e, h, post_mu, post_logstd, *, steps: int, batch: int, lr: float,
                  gen: torch.Generator) -> None:
    opt = torch.optim.Adam(mapping.parameters(), lr=lr)
    mapping.train()
    for _ in range(steps):
        idx = torch.randint(len(e), (batch,), generator=gen)
        loss = mapping.loss(e[idx], h[idx], post_mu[idx], post_logstd[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    mapping.eval()


def train_distance(distance: TemporalDistance, z: torch.Tensor, *, steps: int, batch: int, lr: float,
                   neg_frac: float, rng: np.random.Generator) -> None:
    """z: (n_traj, length + 1, z_dim) world-model features of the offline trajectories."""
    n_traj, length = z.shape[0], z.shape[1] - 1
    opt = torch.optim.Adam(distance.parameters(), lr=lr)
    distance.train()
    for _ in range(steps):
        tra, ta, trb, tb, target = temporal_pairs(n_traj, length, batch, neg_frac, rng)
        pred = distance(z[tra, ta], z[trb, tb]).squeeze(-1)
        loss = F.mse_loss(pred, torch.from_numpy(target))
        opt.zero_grad()
        loss.backward()
        opt.step()
    distance.eval()
