"""The federated algorithm: mu^2-SGD with per-sample clipping, Gaussian noise, noise cancellation.

mu^2-SGD (Levy 2023) with alpha_t = t: query points x_t are the alpha-weighted average of the
iterates w_1..w_t; the server keeps q_t = alpha_t d_t, the STORM-like corrected gradient times
alpha_t, updated from the participants' messages: q_t = q_{t-1} + mean_{i in P_t} message_i, where
a participating client sends the mean over a fresh minibatch of
s_z = alpha_t grad(x_t; z) - alpha_{t-1} grad(x_{t-1}; z) (each s_z clipped to norm C) plus noise.
Then w_{t+1} = Proj_{||w|| <= R}(w_t - eta q_t), eta = lr / T, and x_{t+1} = (A_t x_t + alpha_{t+1} w_{t+1}) / A_{t+1}
with A_t = alpha_1 + ... + alpha_t. The output is the last query point x_{T+1}.

Noise (``Client.noise``): ``cancel`` sends s + y - Y and keeps Y <- y, so the noises a client ever
sent add up to its latest noise alone (they telescope in q); ``fresh`` sends s + y with a new y each
time (the noises pile up in q); ``nonprivate`` sends s. See ``privacy`` for the calibration.
"""
from __future__ import annotations

import numpy as np
import torch

from edgesmith.models.papers.dpfl.config import DPFLConfig
from edgesmith.models.papers.dpfl.logreg import per_sample_grads
from edgesmith.models.papers.dpfl.privacy import noise_std


class Client:
    """One client: its samples in a fixed random order (each used once) and its noise memory."""

    def __init__(self, index: int, x: np.ndarray, y: np.ndarray, cfg: DPFLConfig, sigma: float):
        from edgesmith.models.papers.dpfl.logreg import augment

        self.index, self.cfg, self.sigma = index, cfg, sigma
        order = np.random.default_rng([cfg.seed, 21, index]).permutation(len(x))
        self.xa = augment(x[order])
        self.y = torch.from_numpy(np.asarray(y)[order]).to(torch.float64)
        self.used = 0
        self.participations = 0
        self.last_noise = torch.zeros(self.xa.shape[1], dtype=torch.float64)
        method_code = {"cancel": 1, "fresh": 2, "nonprivate": 3}[cfg.method]
        self.gen = torch.Generator().manual_seed(int(np.random.default_rng([cfg.seed, 31, index, method_code])
                                                     .integers(2**62)))

    def signal(self, x_t: torch.Tensor, x_prev: torch.Tensor, alpha_t: float, alpha_prev: float) -> torch.Tensor:
        """Mean of the clipped s_z over the next ``batch`` unused samples."""
        b = self.cfg.batch
        if self.used + b > len(self.xa):
            raise RuntimeError(f"client {self.index} has no unused samples left")
        xa, y = self.xa[self.used:self.used + b], self.y[self.used:self.used + b]
        self.used += b
        s = alpha_t * per_sample_grads(x_t, xa, y) - alpha_prev * per_sample_grads(x_prev, xa, y)
        norms = s.norm(dim=1, keepdim=True)
        s = s * torch.clamp(self.cfg.clip / norms.clamp_min(1e-300), max=1.0)
        return s.mean(dim=0)

    def noise(self) -> torch.Tensor:
        """The noise term of this participation's message (and the memory update it implies)."""
        self.participations += 1
        if self.cfg.method == "nonprivate":
            return torch.zeros_like(self.last_noise)
        std = noise_std(self.sigma, self.participations, self.cfg.schedule if self.cfg.method == "cancel" else "constant")
        y = std * torch.randn(self.last_noise.shape, generator=self.gen, dtype=torch.float64)
        if self.cfg.method == "fresh":
            return y
        sent = y - self.last_noise
        self.last_noise = y
        return sent

    def message(self, x_t, x_prev, alpha_t, alpha_prev) -> torch.Tensor:
        return self.signal(x_t, x_prev, alpha_t, alpha_prev) + self.noise()


def participation_schedule(cfg: DPFLConfig) -> list[np.ndarray]:
    """The participants of every round: per cycle a random partition of the clients into groups of m."""
    rng = np.random.default_rng([cfg.seed, 3])
    rounds = []
    for _ in range(cfg.cycles):
        perm = rng.permutation(cfg.clients)
        rounds += [np.sort(perm[g * cfg.m:(g + 1) * cfg.m]) for g in range(cfg.clients // cfg.m)]
    return rounds


def run_rounds(cfg: DPFLConfig, clients: dict[int, Client], reduce_sum, log=None) -> torch.Tensor:
    """Run every round; ``clients`` are the ones this process hosts; ``reduce_sum`` sums over processes.

    Returns the final query point. ``log(t, x_t)`` is called after every round if given.
    """
    dim = next(iter(clients.values())).xa.shape[1] if clients else cfg.dim + 1
    w = torch.zeros(dim, dtype=torch.float64)
    x = w.clone()
    x_prev = w.clone()
    q = torch.zeros(dim, dtype=torch.float64)
    eta = cfg.lr / cfg.rounds
    a_sum = 0.0
    for t, part in enumerate(participation_schedule(cfg), start=1):
        local = torch.zeros(dim, dtype=torch.float64)
        for i in part:
            if int(i) in clients:
                local += clients[int(i)].message(x, x_prev, float(t), float(t - 1))
        q = q + reduce_sum(local) / cfg.m
        w = w - eta * q
        norm = float(w.norm())
        if norm > cfg.radius:
            w = w * (cfg.radius / norm)
        a_sum += t
        x_prev, x = x, (a_sum * x + (t + 1) * w) / (a_sum + t + 1)
        if log is not None:
            log(t, x)
    return x
