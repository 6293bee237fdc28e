"""The Gaussian toy problem: ID classes that differ only along a discriminative plane, and OOD sets
built to trigger the two pathologies of supervised OOD scores (arXiv 2507.01831).

ID: ``n_classes`` Gaussians in ``dim`` dimensions with identity covariance; class means sit on a
circle of radius ``radius`` in dimensions 0-1 (the discriminative plane); dimensions 2.. carry
label-irrelevant noise. OOD sets (each the same size as the ID test set):

- ``far-discriminative``: class-mean directions pushed ``far_scale`` times further out (plus the
  usual noise). The classifier is *more* confident there than on ID data, so uncertainty scores
  (MSP, energy) rank these OOD points as in-distribution: AUROC at or below 0.5.
- ``irrelevant-shift``: ID samples moved by ``shift`` standard deviations along one random
  label-irrelevant direction. The features still encode the shift (the oracle probe finds it), but
  the Mahalanobis distance sums squared deviations over every feature direction, so a shift in one
  direction is diluted by the label-irrelevant spread of all the others.
- ``nuisance-collapsed``: ID samples with the label-irrelevant dimensions set to zero (think: clean
  renderings of noisy photos). They sit *closer* to the class means than real ID data, so
  Mahalanobis ranks them as more in-distribution than ID (AUROC far below 0.5) although a linear
  probe on the same features separates them well: far-in-feature-space is not the same as OOD.

The paper names the feature-based pathologies "indistinguishable" and "irrelevant" features; the
two label-irrelevant sets here are our small-scale rendering of the second (the paper's own
experiments use image benchmarks; the exact toy construction is ours).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgesmith.models.papers.ood.config import Config

OOD_SETS = ("far-discriminative", "irrelevant-shift", "nuisance-collapsed")


@dataclass(frozen=True)
class GaussConfig(Config):
    dim: int = 16
    n_classes: int = 3
    radius: float = 3.0
    n_train: int = 3000
    n_test: int = 600
    far_scale: float = 4.0
    shift: float = 2.5

    @classmethod
    def tiny(cls) -> "GaussConfig":
        return cls(n_train=600, n_test=200)

    def validate(self) -> None:
        for name, lo in (("dim", 3), ("n_classes", 2), ("n_train", 20), ("n_test", 8)):
            self._need_int(name, lo)
        for name in ("radius", "far_scale", "shift"):
            self._need_float(name, 0.0)
        if self.far_scale <= 1:
            self._fail("far_scale", f"is {self.far_scale}",
                       "use a factor above 1 so the far set lies beyond the ID classes.")


def class_means(cfg: GaussConfig) -> np.ndarray:
    ang = 2 * np.pi * np.arange(cfg.n_classes) / cfg.n_classes
    mu = np.zeros((cfg.n_classes, cfg.dim))
    mu[:, 0], mu[:, 1] = cfg.radius * np.cos(ang), cfg.radius * np.sin(ang)
    return mu


def sample_id(cfg: GaussConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, cfg.n_classes, n)
    x = class_means(cfg)[y] + rng.normal(size=(n, cfg.dim))
    return x.astype(np.float32), y.astype(np.int64)


def irrelevant_direction(cfg: GaussConfig, rng: np.random.Generator) -> np.ndarray:
    u = np.zeros(cfg.dim)
    u[2:] = rng.normal(size=cfg.dim - 2)
    return u / np.linalg.norm(u)


def make_splits(cfg: GaussConfig, seed: int) -> dict[str, np.ndarray]:
    """Train and test ID data with labels, and every OOD set; fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    x_tr, y_tr = sample_id(cfg, cfg.n_train, rng)
    x_te, y_te = sample_id(cfg, cfg.n_test, rng)
    n = cfg.n_test
    y = rng.integers(0, cfg.n_classes, n)
    far = class_means(cfg)[y] * cfg.far_scale + rng.normal(size=(n, cfg.dim))
    u = irrelevant_direction(cfg, rng)
    shifted = sample_id(cfg, n, rng)[0] + cfg.shift * u
    collapsed = sample_id(cfg, n, rng)[0]
    collapsed[:, 2:] = 0.0
    out = {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te,
           "far-discriminative": far, "irrelevant-shift": shifted, "nuisance-collapsed": collapsed}
    return {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in out.items()}
