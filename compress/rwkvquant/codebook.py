"""Codebook optimisation for RWKV's element-wise multiplication vectors (y = x * mu).

The token-shift mixing vectors (v6 time_maa_*, v7 x_*) multiply activations channel by channel,
so a matrix Hessian does not apply; the output error of channel i is x_i^2 (mu_i - q(mu_i))^2.
RWKVQuant therefore fits a 1-D codebook minimising the loss weighted by the calibration importance
E[x_i^2] (x = the token-shift difference, the tensor each vector multiplies), with each sample's
squared activations clipped at their ``clip_percentile`` so a few outlier tokens do not own the
codebook (the paper's variant; the released code weights by |mean x| in the M-step only). The
loss is minimised exactly (``optimal_1d_codebook``), for the unweighted baseline codebook too.
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from edgesmith.compress.rwkvquant.tensors import VecCodebook, dequantize_codebook, quantize_codebook


class ShiftImportance:
    """Accumulates per-channel clipped E[x^2] from (B, T, C) activations, one sample per sequence."""

    def __init__(self, clip_percentile: float = 99.0):
        self.clip = clip_percentile / 100.0
        self.total = None
        self.count = 0

    def update(self, x: torch.Tensor) -> None:
        x2 = x.detach().to(torch.float32).reshape(x.shape[0], -1, x.shape[-1]) ** 2  # (B, T, C)
        cap = torch.quantile(x2.reshape(x2.shape[0], -1), self.clip, dim=1)  # per-sample clip level
        x2 = torch.minimum(x2, cap[:, None, None])
        s = x2.sum(dim=(0, 1))
        self.total = s if self.total is None else self.total + s
        self.count += x2.shape[0] * x2.shape[1]

    def value(self) -> torch.Tensor:
        return self.total / max(self.count, 1)


@numba.njit(cache=True)
def _run_cost(c0, c1, c2, i, j):
    """Weighted squared error of the run [i, j) of sorted values around its weighted mean."""
    m0 = c0[j] - c0[i]
    if m0 <= 0.0:
        return 0.0
    m1 = c1[j] - c1[i]
    return max(c2[j] - c2[i] - m1 * m1 / m0, 0.0)


@numba.njit(cache=True)
def _dp(c0, c1, c2, k):
    """Cut points of the optimal k clusters: layer q keeps best[j] (first j values in q + 1 clusters); the best
    last cut is monotone in j (the cost obeys the quadrangle inequality), so each layer is filled by divide and
    conquer over j with a shrinking range of cuts, O(n log n) per layer instead of O(n^2)."""
    n = len(c0) - 1
    best = np.full(n + 1, np.inf)
    for j in range(1, n + 1):
        best[j] = _run_cost(c0, c1, c2, 0, j)
    args = np.zeros((k, n + 1), np.int64)
    stack = np.empty((4 * (n + 2), 4), np.int64)
    for q in range(1, k):
        new = np.full(n + 1, np.inf)
        top = 0
        stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = q + 1, n, q, n - 1
        top = 1
        while top > 0:
            top -= 1
            jl, jr, il, ir = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3]
            if jl > jr:
                continue
            j = (jl + jr) // 2
            lo, hi = max(il, q), min(ir, j - 1)
            opt, val = lo, np.inf
            for i in range(lo, hi + 1):
                v = best[i] + _run_cost(c0, c1, c2, i, j)
                if v < val:
                    val, opt = v, i
            new[j], args[q, j] = val, opt
            stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = jl, j - 1, il, opt
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2], stack[top + 1, 3] = j + 1, jr, opt, ir
            top += 2
        best = new
    return args


def optimal_1d_codebook(x: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """The k centroids minimising sum_i w_i (x_i - C[a(i)])^2 exactly (dynamic programming).

    In one dimension the optimal clusters are contiguous runs of the sorted values, so a DP over
    (cluster count, run end) finds the global optimum (Wang and Song's Ckmeans.1d.dp); with the monotone
    cut points of this cost each layer takes O(n log n) (Numba), so n = 4096 takes milliseconds and O(k n)
    memory. Lloyd's k-means only finds a local optimum, and with skewed weights it can end worse on the
    weighted loss than unweighted k-means does.
    """
    order = np.argsort(x, kind="stable")
    xs, ws = np.asarray(x, np.float64)[order], np.asarray(w, np.float64)[order]
    n = len(xs)
    k = min(k, n)
    c0 = np.concatenate([[0.0], np.cumsum(ws)])
    c1 = np.concatenate([[0.0], np.cumsum(ws * xs)])
    c2 = np.concatenate([[0.0], np.cumsum(ws * xs * xs)])
    args = _dp(c0, c1, c2, k)
    bounds, end = [n], n
    for q in range(k - 1, 0, -1):
        end = int(args[q, end])
        bounds.append(end)
    bounds = [0] + bounds[::-1]  # the first cluster starts at 0
    cents = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        den = c0[b] - c0[a]
        cents.append((c1[b] - c1[a]) / den if den > 0 else xs[a:b].mean())
    return np.asarray(cents)


def optimise_codebook(mu: torch.Tensor, importance: torch.Tensor | None, bits: int = 3) -> VecCodebook:
    """Optimal weighted 1-D codebook of ``mu`` with 2**bits centroids (8-bit codebook); importance None = unweighted."""
    shape = tuple(mu.shape)
    x = mu.detach().reshape(-1).to(torch.float64)
    w = torch.ones_like(x) if importance is None else importance.detach().reshape(-1).to(torch.float64)
    w = w.clamp(min=1e-12 * float(w.max().clamp(min=1e-30)))
    C = torch.as_tensor(optimal_1d_codebook(x.numpy(), w.numpy(), 2**bits), dtype=torch.float32)
    if len(C) < 2**bits:  # fewer values than centroids: pad with copies (never chosen twice)
        C = torch.cat([C, C[:1].expand(2**bits - len(C))])
    codes, s, o = quantize_codebook(C)
    Cq = dequantize_codebook(codes, s, o)
    idx = (x.to(torch.float32)[:, None] - Cq[None]).abs().argmin(1)
    return VecCodebook(idx.to(torch.uint8), codes, s.to(torch.float16), o.to(torch.float16), bits, shape)


def weighted_error(mu: torch.Tensor, q: torch.Tensor, importance: torch.Tensor) -> float:
    """sum_i imp_i (mu_i - q_i)^2: the expected squared output error of the multiplication."""
    return float((importance.reshape(-1) * (mu.reshape(-1) - q.reshape(-1)) ** 2).sum())
