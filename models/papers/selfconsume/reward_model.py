"""Pairwise preference data and the Bradley-Terry reward model (the authors' reward.py, re-derived).

A pair (x, y) has label o = 1 when y is preferred (r(y) > r(x)), 0 when x is, 0.5 on a tie. The
model r_theta is an MLP 2 -> 64 -> 64 -> 1 (the authors use one 64-unit hidden layer; a second one
gives the int4 pass a 64-deep MatMul). Loss (mean over pairs):
    -[(1 - o) log s(r_x - r_y) + o log s(r_y - r_x)],   s = the logistic sigmoid.
Trained full-batch with Adam. Unlike the authors' code we do not standardise each 2-D point by its
own mean and std (that maps every point to (+-0.71, -+0.71) and erases its position).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgesmith.common import EdgesmithError


class RewardMLP(nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last hidden layer (the input of the linear head), used by the influence attack."""
        return self.net[:-1](x)


def make_pairs(x: np.ndarray, n_pairs: int, rng: np.random.Generator, reward=None) -> tuple[np.ndarray, np.ndarray]:
    """``n_pairs`` random index pairs (i != j) of ``x`` and their labels under ``reward`` (true reward if None)."""
    from edgesmith.models.papers.selfconsume.world import true_reward

    if len(x) < 2:
        raise EdgesmithError("preference pairs need at least two samples.", "generate more samples per round.")
    i = rng.integers(0, len(x), n_pairs)
    j = (i + rng.integers(1, len(x), n_pairs)) % len(x)
    r = (reward or true_reward)(x)
    o = np.where(r[j] > r[i], 1.0, np.where(r[j] < r[i], 0.0, 0.5))
    return np.stack([i, j], axis=1), o


def bt_loss(r_x: torch.Tensor, r_y: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """Mean Bradley-Terry negative log-likelihood; log-sigmoid keeps it finite for large margins."""
    d = r_x - r_y
    return -((1 - o) * nn.functional.logsigmoid(d) + o * nn.functional.logsigmoid(-d)).mean()


@dataclass(frozen=True)
class RewardTrainConfig:
    steps: int = 150
    lr: float = 1e-2
    hidden: int = 64


def train_reward_model(x: np.ndarray, pairs: np.ndarray, o: np.ndarray, cfg: RewardTrainConfig, seed: int) -> RewardMLP:
    """Fit a fresh BT reward model on (pairs, labels) of the points ``x``; deterministic for ``seed``.

    Runs on one thread (restored afterwards): the batches are tiny, so more threads only add
    synchronisation, and the result does not depend on the machine's core count.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        model = RewardMLP(cfg.hidden)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        xt = torch.tensor(x, dtype=torch.float32)
        ii, jj = torch.from_numpy(pairs[:, 0]), torch.from_numpy(pairs[:, 1])
        ot = torch.tensor(o, dtype=torch.float32)
        for _ in range(cfg.steps):
            opt.zero_grad()
            r = model(xt)[:, 0]
            loss = bt_loss(r[ii], r[jj], ot)
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def score(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(x, dtype=torch.float32))[:, 0].double().numpy()


def pairwise_accuracy(r_hat_x: np.ndarray, r_hat_y: np.ndarray, r_x: np.ndarray, r_y: np.ndarray) -> float:
    """Share of untied pairs that the model orders like the true reward (model ties count as wrong)."""
    keep = r_x != r_y
    if not keep.any():
        raise EdgesmithError("every held-out pair is tied under the true reward.", "draw more or different pairs.")
    agree = np.sign(r_hat_y - r_hat_x) == np.sign(r_y - r_x)
    return float(agree[keep].mean())
