"""Choosing PTQ calibration samples: a small registry of selectors over a candidate pool.

A selector maps a pool of candidate inputs (training split only) to ``n`` distinct indices into it::

    idx = select_indices("influence", pool, 32, seed=0, features=f, labels=c)
    calib = select_calibration(producer, 32, "influence", seed=0)   # what ``deploy`` calls

- ``first``: the first ``n`` candidates (the producer's own order; deploy's historical behaviour).
- ``random``: ``n`` candidates uniformly without replacement, seeded.
- ``influence``: the ``n`` candidates with the highest training-free influence score, class-balanced.

The influence score generalises the one derived for paper 3's noise model (``models.papers.influence.score``,
the project's reading, not the paper's formula) to any model: there, a sample helps when its noise lies
in its own class's covariance subspace and hurts when it lies in another class's. Here the covariance
subspaces are estimated from a feature space: for each class ``c`` the top principal directions
``U_c`` of the class-centred features (the fewest that hold ``energy`` = 90% of the class's variance),
and for a sample ``z`` (centred by its class mean) of class ``y``

    s = (||U_y U_y^T z||^2 - max_{c != y} ||U_c U_c^T z||^2) / ||z||^2,

with ``||z - U_y U_y^T z||^2`` in place of the max when there is a single class. The feature space is
the fp32 model's penultimate activations (the input of the last ``nn.Linear`` it calls; the flattened
input when it has none), and the classes are the model's predicted classes (argmax of a 2-D output
with at least two columns; otherwise one class). Why this may help PTQ: high-scoring samples are
typical of their (predicted) class, so activation ranges are calibrated on what the test data look
like rather than on outliers; class balancing keeps every class's activations in the ranges. Whether
it beats random choice is measured by ``bench.studies.calib_select``, not assumed.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from edgesmith.common import EdgesmithError, check_finite_array
from edgesmith.common.registry import Registry

SelectorFn = Callable[..., np.ndarray]
SELECTORS: Registry[SelectorFn] = Registry("calibration selector")
POOL_FACTOR = 8  # candidates drawn per calibration sample wanted, for the selectors that choose


def register_selector(name: str) -> Callable[[SelectorFn], SelectorFn]:
    """Decorator: ``fn(pool, n, *, rng, features, labels) -> indices`` becomes selector ``name``."""

    def deco(fn: SelectorFn) -> SelectorFn:
        return SELECTORS.register(name, fn)

    return deco


def selector_names() -> list[str]:
    return SELECTORS.names()


def check_selector(name: str) -> str:
    SELECTORS.get(name)
    return name


def select_indices(name: str, pool: np.ndarray, n: int, *, seed: int = 0, features: np.ndarray | None = None,
                   labels: np.ndarray | None = None) -> np.ndarray:
    """Indices (sorted, distinct) of ``min(n, len(pool))`` calibration samples chosen from ``pool``."""
    check_selector(name)
    pool = check_finite_array(pool, "the calibration pool")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise EdgesmithError(f"the number of calibration samples is {n!r}.", "ask for at least 1 sample.")
    for what, arr in (("features", features), ("labels", labels)):
        if arr is not None and len(arr) != len(pool):
            raise EdgesmithError(f"{len(arr)} {what} were given for a pool of {len(pool)} samples.",
                                 f"give one row of {what} per pool sample.")
    n = min(int(n), len(pool))
    idx = SELECTORS.get(name)(pool, n, rng=np.random.default_rng(seed), features=features, labels=labels)
    return np.sort(np.asarray(idx, dtype=np.int64))


@register_selector("first")
def _first(pool, n, *, rng, features, labels) -> np.ndarray:
    return np.arange(n)


@register_selector("random")
def _random(pool, n, *, rng, features, labels) -> np.ndarray:
    return rng.choice(len(pool), size=n, replace=False)


@register_selector("influence")
def _influence(pool, n, *, rng, features, labels) -> np.ndarray:
    feats = pool if features is None else features
    scores = influence_scores(feats, labels)
    return balanced_top(scores, n, labels, rng)


def class_subspace(z: np.ndarray, energy: float) -> np.ndarray:
    """Orthonormal columns spanning the fewest principal directions of ``z`` (rows already centred)
    that hold ``energy`` of its variance; an empty basis for a class of one sample."""
    if len(z) < 2:
        return np.zeros((z.shape[1], 0))
    _, s, vt = np.linalg.svd(z, full_matrices=False)
    power = s ** 2
    if power.sum() <= 0:
        return np.zeros((z.shape[1], 0))
    k = int(np.searchsorted(np.cumsum(power) / power.sum(), energy) + 1)
    return vt[: min(k, len(s))].T


def influence_scores(features: np.ndarray, labels: np.ndarray | None = None, energy: float = 0.9) -> np.ndarray:
    """The generalised training-free influence score of each row of ``features`` (see module doc)."""
    if not 0.0 < energy < 1.0:
        raise EdgesmithError(f"energy is {energy!r}.", "use a fraction of variance between 0 and 1, e.g. 0.9.")
    z = check_finite_array(np.asarray(features, dtype=np.float64), "the features").reshape(len(features), -1)
    lab = np.zeros(len(z), dtype=np.int64) if labels is None else np.asarray(labels).astype(np.int64)
    classes = np.unique(lab)
    zc = z.copy()
    bases = {}
    for c in classes:
        rows = lab == c
        zc[rows] -= z[rows].mean(axis=0)
        bases[c] = class_subspace(zc[rows], energy)
    norm = np.maximum(np.einsum("nd,nd->n", zc, zc), 1e-30)
    proj = {c: np.sum((zc @ u) ** 2, axis=1) / norm for c, u in bases.items()}
    scores = np.empty(len(z))
    for c in classes:
        rows = lab == c
        others = [proj[o][rows] for o in classes if o != c]
        rival = np.max(others, axis=0) if others else 1.0 - proj[c][rows]
        scores[rows] = proj[c][rows] - rival
    return scores


def balanced_top(scores: np.ndarray, n: int, labels: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """The ``n`` highest scores with each class's share of ``n`` proportional to its share of the pool
    (largest remainders); ties are broken by a seeded shuffle."""
    lab = np.zeros(len(scores), dtype=np.int64) if labels is None else np.asarray(labels).astype(np.int64)
    classes, counts = np.unique(lab, return_counts=True)
    quota = counts * n / len(lab)
    take = np.floor(quota).astype(int)
    for i in np.argsort(-(quota - take), kind="stable")[: n - take.sum()]:
        take[i] += 1
    order = rng.permutation(len(scores))
    order = order[np.argsort(-scores[order], kind="stable")]
    chosen = [order[lab[order] == c][:k] for c, k in zip(classes, take)]
    return np.concatenate(chosen)


def model_features(module, pool: np.ndarray, batch: int = 256) -> tuple[np.ndarray, np.ndarray | None]:
    """The fp32 ``module``'s penultimate activations on ``pool`` (the input of the last ``nn.Linear``
    it calls, flattened; the flattened input when it calls none) and its predicted classes (argmax of
    a 2-D output with two or more columns, else ``None``)."""
    import torch
    from torch import nn

    seen: list = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach()))
             for m in module.modules() if isinstance(m, nn.Linear)]
    feats, outs = [], []
    try:
        with torch.no_grad():
            for i in range(0, len(pool), batch):
                x = torch.from_numpy(np.ascontiguousarray(pool[i : i + batch], dtype=np.float32))
                seen.clear()
                out = module(x)
                f = seen[-1] if seen else x
                feats.append(f.reshape(len(x), -1).numpy())
                outs.append(out.detach().numpy() if isinstance(out, torch.Tensor) else np.asarray(out))
    finally:
        for h in hooks:
            h.remove()
    out = np.concatenate(outs)
    labels = np.argmax(out, axis=1) if out.ndim == 2 and out.shape[1] >= 2 else None
    return np.concatenate(feats).astype(np.float64), labels


def select_calibration(producer, n: int, name: str = "first", *, seed: int = 0,
                       pool_factor: int = POOL_FACTOR) -> np.ndarray:
    """``n`` calibration samples of a built ``producer`` chosen by selector ``name``.

    ``first`` returns ``producer.calibration_data(n)`` unchanged. The others draw a pool of
    ``pool_factor * n`` training samples (fewer if the training split is smaller) and choose ``n``;
    ``influence`` scores the pool in the fp32 model's feature space (see ``model_features``).
    """
    check_selector(name)
    if name == "first":
        return producer.calibration_data(n)
    pool = check_finite_array(producer.calibration_data(pool_factor * n), "the calibration pool")
    features = labels = None
    if name == "influence":
        features, labels = model_features(producer.module, pool)
    idx = select_indices(name, pool, n, seed=seed, features=features, labels=labels)
    return np.ascontiguousarray(pool[idx])
