"""Distributed PCA made here: heterogeneous workers, f(X) = -tr(X^T A X) / 2, A = mean of local covariances.

Worker i draws samples x = L_i z from its own covariance S_i = B + V_i diag(c) V_i^T: a shared
spectrum B (decaying eigenvalues, a gap after the p-th) plus a worker-specific low-rank part V_i,
so every worker's local optimum differs from the global one and its local gradient does not vanish
at the global optimum. That heterogeneity is what makes compression without error feedback stall.
The covariances are scaled so the global A has largest eigenvalue 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class PCAProblem:
    n: int
    p: int
    workers: int
    samples_per_worker: int
    seed: int
    hetero: float = 0.6

    def factors(self) -> list[np.ndarray]:
        """L_i with S_i = L_i L_i^T, scaled so that mean_i S_i has top eigenvalue 1."""
        rng = np.random.default_rng([self.seed, 17])
        q, _ = np.linalg.qr(rng.standard_normal((self.n, self.n)))
        spec = np.concatenate([1.0 - 0.08 * np.arange(self.p), 0.45 * 0.93 ** np.arange(self.n - self.p)])
        shared = q * np.sqrt(spec)
        out = []
        for _ in range(self.workers):
            v = rng.standard_normal((self.n, 3)) / np.sqrt(self.n)
            out.append(np.concatenate([shared, np.sqrt(self.hetero) * v * np.sqrt(self.n / 3)], axis=1))
        scale = np.linalg.eigvalsh(np.mean([f @ f.T for f in out], axis=0))[-1]
        return [f / np.sqrt(scale) for f in out]

    def samples(self, worker: int, count: int, split: str = "train") -> np.ndarray:
        """``count`` samples of one worker (float32); ``split`` picks an independent stream."""
        f = self.factors()[worker]
        stream = {"train": 0, "calibration": 1, "test": 2}[split]
        rng = np.random.default_rng([self.seed, 101, worker, stream])
        return (rng.standard_normal((count, f.shape[1])) @ f.T).astype(np.float32)

    def local_covariance(self, worker: int) -> torch.Tensor:
        x = torch.from_numpy(self.samples(worker, self.samples_per_worker)).double()
        return x.T @ x / len(x)


def objective(a: torch.Tensor, x: torch.Tensor) -> float:
    return float(-0.5 * torch.trace(x.T @ a @ x))


def optimum(a: torch.Tensor, p: int) -> float:
    """f* = -(sum of the p largest eigenvalues of A) / 2."""
    return float(-0.5 * torch.linalg.eigvalsh(a)[-p:].sum())


def explained_variance_ratio(x: np.ndarray, recon: np.ndarray) -> float:
    """1 - ||x - x_hat||^2 / ||x||^2 over a batch (data are zero-mean by construction)."""
    x, recon = np.asarray(x, np.float64), np.asarray(recon, np.float64)
    return float(1.0 - np.sum((x - recon) ** 2) / np.sum(x ** 2))
