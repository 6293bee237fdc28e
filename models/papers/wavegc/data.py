"""Long-range node regression made here, and the packed input (features + eigenpairs + mask).

Graphs: a backbone path or ring (three quarters of the nodes) with pendant leaves hung on random
backbone nodes, ``min_nodes`` to ``max_nodes`` nodes, so diameters run from about 10 to 50 hops.
Node features: ``[is_source, source value, u, 1]`` with ``u ~ N(0, 1)``. Target of node i:

    y_i = sum_s v_s * decay ** d(i, s)   +   mean_{k ~ i} u_k

The first term (``n_sources`` signed sources, ``decay`` 0.9 so a source still weighs 0.35 at 10
hops) is long range: an L-layer message-passing GNN only sees sources within L hops. The second is
one-hop, short range. The metric is the MAE over real nodes.

Packing: the eigendecomposition of the symmetric normalised Laplacian ``L = I - D^-1/2 A D^-1/2``
runs here, in NumPy, outside the model. One graph becomes a ``(max_nodes, F + 2 + max_nodes)``
float32 array whose row k is ``[x_k, mask_k, lambda_k, U[k, :]]``: node k's features and mask, the
k-th eigenvalue, and node k's row of the eigenvector matrix; rows and columns past the node count
are zero. ``unpack`` splits it back with slices only, so the model's unpacking exports to ONNX.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse.csgraph import shortest_path

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.wavegc.config import DataConfig

N_FEATURES = 4


def make_graph(n: int, ring: bool, rng: np.random.Generator) -> np.ndarray:
    """Adjacency (n, n) of a path/ring backbone with pendant leaves; connected by construction."""
    backbone = max(3, int(round(0.75 * n)))
    a = np.zeros((n, n), dtype=np.float32)
    idx = np.arange(backbone - 1)
    a[idx, idx + 1] = a[idx + 1, idx] = 1.0
    if ring:
        a[0, backbone - 1] = a[backbone - 1, 0] = 1.0
    for leaf in range(backbone, n):
        host = int(rng.integers(0, backbone))
        a[leaf, host] = a[host, leaf] = 1.0
    return a


def normalized_laplacian_eigs(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending, clipped to [0, 2]) and eigenvectors of ``I - D^-1/2 A D^-1/2``."""
    deg = adj.sum(1)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-12)), 0.0)
    lap = np.eye(len(adj)) - inv[:, None] * adj * inv[None, :]
    lam, u = np.linalg.eigh(lap.astype(np.float64))
    return np.clip(lam, 0.0, 2.0), u


def pack(x: np.ndarray, lam: np.ndarray, u: np.ndarray, max_nodes: int) -> np.ndarray:
    """One graph's features (n, F), eigenvalues (n,) and eigenvectors (n, n) -> (max_nodes, F + 2 + max_nodes)."""
    n, f = x.shape
    if n > max_nodes:
        raise EdgesmithError(f"a graph has {n} nodes but the packed input holds at most {max_nodes}.",
                             "drop larger graphs or build the model with a larger max_nodes.")
    if lam.shape != (n,) or u.shape != (n, n):
        raise EdgesmithError(f"eigenpairs of shapes {lam.shape} and {u.shape} do not fit a graph of {n} nodes.",
                             "pass all n eigenvalues and the (n, n) eigenvector matrix of that graph.")
    out = np.zeros((max_nodes, f + 2 + max_nodes), dtype=np.float32)
    out[:n, :f] = x
    out[:n, f] = 1.0
    out[:n, f + 1] = lam
    out[:n, f + 2:f + 2 + n] = u
    return out


def unpack(packed: torch.Tensor, n_features: int):
    """(B, N, F + 2 + N) -> features (B, N, F), mask (B, N), eigenvalues (B, N), eigenvectors (B, N, N)."""
    f = n_features
    # one-column slices + squeeze rather than integer indexing: they export as Slice, not Gather
    return packed[..., :f], packed[..., f : f + 1].squeeze(-1), packed[..., f + 1 : f + 2].squeeze(-1), packed[..., f + 2:]


def gcn_propagation(adj: np.ndarray, max_nodes: int) -> np.ndarray:
    """Kipf-Welling renormalised adjacency ``D~^-1/2 (A + I) D~^-1/2``, zero-padded (for the GCN baseline)."""
    a = adj + np.eye(len(adj), dtype=adj.dtype)
    inv = 1.0 / np.sqrt(a.sum(1))
    out = np.zeros((max_nodes, max_nodes), dtype=np.float32)
    out[: len(adj), : len(adj)] = inv[:, None] * a * inv[None, :]
    return out


@dataclass
class GraphSet:
    """One split: packed inputs (G, N, F+2+N), targets and their long-range part (G, N), node masks,
    GCN propagation matrices (G, N, N), node counts and each node's hop distance to its nearest source."""

    packed: np.ndarray
    y: np.ndarray
    y_long: np.ndarray
    mask: np.ndarray
    a_hat: np.ndarray
    n_nodes: np.ndarray
    hops: np.ndarray

    def __len__(self) -> int:
        return len(self.packed)


def make_split(cfg: DataConfig, n_graphs: int, rng: np.random.Generator) -> GraphSet:
    nmax = cfg.max_nodes
    packed = np.zeros((n_graphs, nmax, N_FEATURES + 2 + nmax), np.float32)
    y, y_long, mask = (np.zeros((n_graphs, nmax), np.float32) for _ in range(3))
    a_hat = np.zeros((n_graphs, nmax, nmax), np.float32)
    counts = np.zeros(n_graphs, np.int64)
    hops = np.zeros((n_graphs, nmax), np.int64)
    for g in range(n_graphs):
        n = int(rng.integers(cfg.min_nodes, cfg.max_nodes + 1))
        adj = make_graph(n, ring=bool(rng.integers(0, 2)), rng=rng)
        dist = shortest_path(adj, unweighted=True)
        src = rng.choice(n, size=cfg.n_sources, replace=False)
        vals = rng.choice([-1.0, 1.0], size=cfg.n_sources) * rng.uniform(0.5, 1.5, size=cfg.n_sources)
        x = np.zeros((n, N_FEATURES), np.float32)
        x[src, 0] = 1.0
        x[src, 1] = vals
        x[:, 2] = rng.standard_normal(n)
        x[:, 3] = 1.0
        long = (vals[None, :] * cfg.decay ** dist[:, src]).sum(1)
        short = (adj @ x[:, 2]) / adj.sum(1)
        lam, u = normalized_laplacian_eigs(adj)
        packed[g] = pack(x, lam, u, nmax)
        y[g, :n], y_long[g, :n], mask[g, :n] = long + short, long, 1.0
        a_hat[g] = gcn_propagation(adj, nmax)
        counts[g] = n
        hops[g, :n] = dist[:, src].min(1)
    return GraphSet(packed, y, y_long, mask, a_hat, counts, hops)


def load_splits(cfg: DataConfig) -> dict[str, GraphSet]:
    """Train and test splits, deterministic for ``cfg`` (the test split has its own generator stream)."""
    rng_train, rng_test = (np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(2))
    return {"train": make_split(cfg, cfg.n_train, rng_train), "test": make_split(cfg, cfg.n_test, rng_test)}
