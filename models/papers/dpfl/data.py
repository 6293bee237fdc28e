"""Federated logistic-regression data made here: M clients, heterogeneous feature means, norms <= 1.

Labels follow a logistic model with a fixed true weight vector; each client's features are shifted
by its own random mean, so clients differ (heterogeneous data). Features are scaled so every row
has L2 norm at most 1 (with the constant 1 appended for the bias, at most sqrt 2): per-sample
gradients of the logistic loss are bounded, which clipping then enforces exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FedData:
    clients: int
    per_client: int
    dim: int
    seed: int
    test: int = 2000

    def _draw(self, rng: np.random.Generator, n: int, mean: np.ndarray, w: np.ndarray):
        x = rng.standard_normal((n, self.dim)) * 0.6 + mean
        x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
        p = 1.0 / (1.0 + np.exp(-(x @ w[:-1] + w[-1])))
        y = (rng.random(n) < p).astype(np.float32)
        return x.astype(np.float32), y

    def _params(self):
        rng = np.random.default_rng([self.seed, 5])
        w = rng.standard_normal(self.dim + 1)
        w *= 8.0 / np.linalg.norm(w)
        means = rng.standard_normal((self.clients, self.dim)) * 0.15
        return w, means

    def client(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        w, means = self._params()
        return self._draw(np.random.default_rng([self.seed, 11, i]), self.per_client, means[i], w)

    def train(self) -> tuple[np.ndarray, np.ndarray]:
        parts = [self.client(i) for i in range(self.clients)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def test_set(self) -> tuple[np.ndarray, np.ndarray]:
        """Fresh samples from the same clients' distributions (each client equally)."""
        w, means = self._params()
        rng = np.random.default_rng([self.seed, 13])
        per = -(-self.test // self.clients)
        parts = [self._draw(rng, per, means[i], w) for i in range(self.clients)]
        x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        return x[: self.test], y[: self.test]
