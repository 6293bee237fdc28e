"""A slow, direct NumPy transcription of GBRL's tree fitting, for checking the Numba engine.

No histograms, no subtraction: every candidate of every node is scored from the raw rows, the
way GBRL's CPU fitter does, so agreement means the fast path computes the same thing.
"""
from __future__ import annotations

import numpy as np


def gbrl_thresholds(col: np.ndarray, n_candidates: int) -> np.ndarray:
    """GBRL's quantile candidates of one column: last value of each equal-count chunk, repeats dropped."""
    srt = np.sort(col)
    n = len(col)
    chunks = n_candidates + 1
    counts = np.full(chunks, n // chunks)
    counts[: n % chunks] += 1
    out: list[float] = []
    for c in np.cumsum(counts)[:n_candidates]:
        if c == 0:
            continue
        v = float(srt[c - 1])
        if not out or out[-1] != v:
            out.append(v)
    return np.array(out, dtype=np.float32)


def _score(G, left, kind):
    s = 0.0
    for side in (G[left], G[~left]):
        if len(side):
            s += float(np.sum(side.sum(axis=0) ** 2)) / len(side)
    return np.sqrt(s) if kind == "cosine" else s


def fit_reference(X, grads, depth, kind, policy, n_bins=256, min_leaf=0):
    """Returns heap-order (feature, threshold) per split node (threshold inf = no split) and leaves."""
    X = np.asarray(X, np.float32)
    g = np.asarray(grads, np.float64)
    G = g.copy()
    if kind == "l2":
        G = G - G.mean(axis=0)
        sd = G.std(axis=0, ddof=1)
        G = G / np.where(sd > 0, sd, 1.0)
    cands = [(f, t) for f in range(X.shape[1]) for t in gbrl_thresholds(X[:, f], n_bins - 1)]
    n_split = 2**depth - 1
    feat = np.zeros(n_split, int)
    thr = np.full(n_split, np.inf, np.float32)
    members = {0: np.arange(len(X))}

    def path(node):
        out = []
        while node > 0:
            node = (node - 1) // 2
            out.append((feat[node], thr[node]))
        return out

    for level in range(depth):
        nodes = range(2**level - 1, 2**(level + 1) - 1)
        if policy == "oblivious":
            best, arg = -np.inf, None
            for f, t in cands:
                if (f, t) in path(nodes[0]):
                    continue
                total = 0.0
                for node in nodes:
                    idx = members[node]
                    left = X[idx, f] <= t
                    if left.sum() < min_leaf or (~left).sum() < min_leaf:
                        total = -np.inf
                        break
                    total += _score(G[idx], left, kind)
                if total > best:
                    best, arg = total, (f, t)
            if arg is not None and np.isfinite(best):
                for node in nodes:
                    feat[node], thr[node] = arg
        else:
            for node in nodes:
                idx = members[node]
                if len(idx) == 0:
                    continue
                parent = 0.0
                if level > 0:
                    parent = float(np.sum(G[idx].sum(axis=0) ** 2)) / len(idx)
                    parent = np.sqrt(parent) if kind == "cosine" else parent
                best, arg = -np.inf, None
                for f, t in cands:
                    if (f, t) in path(node):
                        continue
                    left = X[idx, f] <= t
                    nl, nr = left.sum(), (~left).sum()
                    if nl < max(min_leaf, 1) or nr < max(min_leaf, 1):
                        continue
                    s = _score(G[idx], left, kind)
                    if s > best:
                        best, arg = s, (f, t)
                if arg is not None and best - parent > 0:
                    feat[node], thr[node] = arg
        for node in nodes:
            idx = members[node]
            right = X[idx, feat[node]] > thr[node]
            members[2 * node + 1], members[2 * node + 2] = idx[~right], idx[right]
    leaves = np.zeros((2**depth, g.shape[1]), np.float32)
    for leaf in range(2**depth):
        idx = members[n_split + leaf]
        if len(idx):
            leaves[leaf] = g[idx].mean(axis=0)
    return feat, thr, leaves
