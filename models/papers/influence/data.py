"""Sampling the two-patch feature-noise data with class-dependent noise covariance (paper 3's model)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgesmith.models.papers.influence.config import NoiseDataConfig

# The feature direction and the noise basis are properties of the distribution, not of a draw: fixed
# seeds keep them identical across the train and test splits and across data seeds.
_BASIS_SEED = 1234
_MU_SEED = 99


@dataclass
class NoiseSplit:
    """``x`` (n, 2, d) float32, ``y`` in {-1, +1}, ``atypical`` (mu = 0) mask, and the noise patch ``xi``."""

    x: np.ndarray
    y: np.ndarray
    atypical: np.ndarray

    @property
    def xi(self) -> np.ndarray:
        return self.x[:, 1]

    @property
    def labels01(self) -> np.ndarray:
        """Class index (0 for y = -1, 1 for y = +1): the column of the model's output for that class."""
        return (self.y > 0).astype(np.int64)


def noise_bases(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal bases (d, d/2) of the class +1 and class -1 noise subspaces."""
    q, _ = np.linalg.qr(np.random.default_rng(_BASIS_SEED).standard_normal((d, d)))
    return q[:, : d // 2], q[:, d // 2:]


def feature_vector(cfg: NoiseDataConfig) -> np.ndarray:
    mu = np.random.default_rng(_MU_SEED).standard_normal(cfg.d)
    return mu / np.linalg.norm(mu) * cfg.mu_norm


def covariances(cfg: NoiseDataConfig) -> dict[int, np.ndarray]:
    """The exact ``Sigma_+`` and ``Sigma_-`` the noise is drawn from (used by the oracle influence score)."""
    p_pos, p_neg = noise_bases(cfg.d)
    rho, s2 = cfg.class_dependence, cfg.sigma ** 2
    eye = np.eye(cfg.d)
    return {1: (1 - rho) * s2 * eye + rho * 2 * s2 * p_pos @ p_pos.T,
            -1: (1 - rho) * s2 * eye + rho * 2 * s2 * p_neg @ p_neg.T}


def sample(cfg: NoiseDataConfig, n: int, seed: int) -> NoiseSplit:
    """``n`` samples, balanced in expectation, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    p_pos, p_neg = noise_bases(cfg.d)
    y = rng.choice(np.array([-1, 1]), size=n)
    atypical = rng.random(n) < cfg.atypical
    iso = rng.standard_normal((n, cfg.d)) * cfg.sigma
    sub = rng.standard_normal((n, cfg.d // 2)) * cfg.sigma * np.sqrt(2.0)
    own = np.where((y > 0)[:, None], sub @ p_pos.T, sub @ p_neg.T)
    xi = np.sqrt(1 - cfg.class_dependence) * iso + np.sqrt(cfg.class_dependence) * own
    signal = np.where(atypical[:, None], 0.0, y[:, None] * feature_vector(cfg)[None, :])
    x = np.stack([signal, xi], axis=1).astype(np.float32)
    return NoiseSplit(np.ascontiguousarray(x), y.astype(np.int64), atypical)


def load_splits(cfg: NoiseDataConfig) -> dict[str, NoiseSplit]:
    """Train and test splits from disjoint seed streams of ``cfg.seed``."""
    return {"train": sample(cfg, cfg.n_train, 2 * cfg.seed), "test": sample(cfg, cfg.n_test, 2 * cfg.seed + 1)}
