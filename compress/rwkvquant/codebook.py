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


def optimal_1d_codebook(x: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """The k centroids minimising sum_i w_i (x_i - C[a(i)])^2 exactly (dynamic programming).

    In one dimension the optimal clusters are contiguous runs of the sorted values, so a DP over
    (cluster count, run end) finds the global optimum in O(k n^2); Lloyd's k-means only finds a local
    one, and with skewed weights it can end worse on the weighted loss than unweighted k-means does.
    """
    order = np.argsort(x, kind="stable")
    xs, ws = x[order], w[order]
    n = len(xs)
    k = min(k, n)
    c0 = np.concatenate([[0.0], np.cumsum(ws)])
    c1 = np.concatenate([[0.0], np.cumsum(ws * xs)])
    c2 = np.concatenate([[0.0], np.cumsum(ws * xs * xs)])
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")  # run [i, j)
    with np.errstate(divide="ignore", invalid="ignore"):
        m0, m1 = c0[j] - c0[i], c1[j] - c1[i]
        cost = np.maximum(c2[j] - c2[i] - m1 * m1 / m0, 0.0)
    cost = np.where(j > i, np.nan_to_num(cost, nan=0.0), np.inf)
    best = cost[0].copy()  # best[j]: one cluster over the first j values
    cuts = []
    for _ in range(1, k):
        total = best[:, None] + cost  # total[i, j]: first i values in fewer clusters, then run [i, j)
        arg = np.argmin(total, axis=0)
        cuts.append(arg)
        best = total[arg, np.arange(n + 1)]
    bounds, end = [n], n
    for arg in reversed(cuts):
        end = int(arg[end])
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
