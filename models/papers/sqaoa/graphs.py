"""Signed graphs for correlation clustering: generation, the agreement objective, brute force.

A graph on ``n`` nodes is a symmetric ``(n, n)`` float array ``W`` with zero diagonal; ``W[i, j]`` is
+w (the pair should share a cluster), -w (it should be separated) or 0 (no edge). A clustering is
an integer label per node. The objective (maximise agreement) counts ``w`` for every positive pair
inside one cluster plus ``|w|`` for every negative pair split across clusters, as in the SQAOA code
(helpers/optimization.py ``max_agree``).
"""
from __future__ import annotations

import numpy as np

from edgesmith.common import EdgesmithError


def check_graph(w: np.ndarray) -> np.ndarray:
    """Return ``w`` as float64 after checking it is a square, symmetric, finite, zero-diagonal matrix."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] < 1:
        raise EdgesmithError(f"a signed graph must be a square (n, n) matrix, got shape {w.shape}.",
                             "pass the symmetric weight matrix of the graph.")
    if not np.all(np.isfinite(w)) or not np.allclose(w, w.T) or np.any(np.diag(w) != 0):
        raise EdgesmithError("the signed graph is not symmetric with a zero diagonal and finite weights.",
                             "pass W with W[i, j] == W[j, i], W[i, i] == 0 and finite entries.")
    return w


def erdos_renyi_signed(n: int, p_edge: float, p_pos: float, rng: np.random.Generator) -> np.ndarray:
    """An Erdos-Renyi G(n, p_edge) graph with weight +1 (probability ``p_pos``) or -1 per edge.

    Redrawn until it has at least one edge, like ``data_set_generation_ER`` of the SQAOA code, so the
    optimum is positive and the approximation ratio defined.
    """
    if n < 2:
        raise EdgesmithError(f"a graph needs at least 2 nodes, got {n}.", "use n >= 2.")
    iu = np.triu_indices(n, 1)
    while True:
        edge = rng.random(len(iu[0])) < p_edge
        sign = np.where(rng.random(len(iu[0])) < p_pos, 1.0, -1.0)
        if edge.any():
            break
    w = np.zeros((n, n))
    w[iu] = edge * sign
    return w + w.T


def pack(w: np.ndarray) -> np.ndarray:
    """The upper-triangle weights of ``w`` (row-major, ``n(n-1)/2`` values): the model's input."""
    return np.asarray(w)[np.triu_indices(len(w), 1)]


def unpack(x: np.ndarray, n: int) -> np.ndarray:
    """Inverse of ``pack`` for one graph."""
    w = np.zeros((n, n))
    w[np.triu_indices(n, 1)] = x
    return w + w.T


def agreement(w: np.ndarray, labels) -> float:
    """Agreement of a clustering (one label per node): positive pairs joined plus negative pairs split."""
    labels = np.asarray(labels)
    same = labels[:, None] == labels[None, :]
    score = np.where(same, np.clip(w, 0, None), np.clip(-w, 0, None))
    return float(np.triu(score, 1).sum())


def set_partitions(n: int) -> np.ndarray:
    """Every partition of ``n`` nodes once, as restricted-growth label rows (Bell(n) rows)."""
    rows = [[0]]
    for _ in range(1, n):
        rows = [r + [c] for r in rows for c in range(max(r) + 2)]
    return np.array(rows, dtype=np.int64).reshape(-1, n)


def brute_force(w: np.ndarray) -> tuple[float, np.ndarray]:
    """Maximum agreement over all clusterings and one clustering attaining it (n <= 11 or so)."""
    w = check_graph(w)
    n = len(w)
    if n > 11:
        raise EdgesmithError(f"brute force over the Bell({n}) clusterings is too slow.", "use n <= 11.")
    parts = set_partitions(n)
    iu = np.triu_indices(n, 1)
    same = parts[:, iu[0]] == parts[:, iu[1]]
    wv = w[iu]
    scores = np.where(same, np.clip(wv, 0, None), np.clip(-wv, 0, None)).sum(axis=1)
    best = int(np.argmax(scores))
    return float(scores[best]), parts[best]
