"""Codebook optimisation for RWKV's element-wise multiplication vectors (y = x * mu).

The token-shift mixing vectors (v6 time_maa_*, v7 x_*) multiply activations channel by channel,
so a matrix Hessian does not apply; the output error of channel i is x_i^2 (mu_i - q(mu_i))^2.
RWKVQuant therefore fits a 1-D codebook by k-means weighted by the calibration importance
E[x_i^2] (x = the token-shift difference, the tensor each vector multiplies), with each sample's
squared activations clipped at their ``clip_percentile`` so a few outlier tokens do not own the
codebook (the paper's variant; the released code weights by |mean x| in the M-step only).
"""
from __future__ import annotations

import torch

from compress.rwkvquant.tensors import VecCodebook, dequantize_codebook, quantize_codebook


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


def optimise_codebook(mu: torch.Tensor, importance: torch.Tensor | None, bits: int = 3,
                      iters: int = 100) -> VecCodebook:
    """Weighted 1-D k-means of ``mu`` into 2**bits centroids (8-bit codebook); importance None = plain k-means."""
    shape = tuple(mu.shape)
    x = mu.detach().reshape(-1).to(torch.float64)
    w = torch.ones_like(x) if importance is None else importance.detach().reshape(-1).to(torch.float64)
    w = w.clamp(min=1e-12 * float(w.max().clamp(min=1e-30)))
    k = 2**bits
    # init at weighted quantiles: deterministic and spread where the importance mass is
    order = torch.argsort(x)
    cdf = torch.cumsum(w[order], 0) / w.sum()
    C = torch.stack([x[order][torch.searchsorted(cdf, torch.tensor((i + 0.5) / k, dtype=torch.float64)).clamp(
        max=len(x) - 1)] for i in range(k)])
    for _ in range(iters):
        a = (x[:, None] - C[None]).abs().argmin(1)
        num = torch.zeros(k, dtype=torch.float64).index_add_(0, a, w * x)
        den = torch.zeros(k, dtype=torch.float64).index_add_(0, a, w)
        newC = torch.where(den > 0, num / den.clamp(min=1e-30), C)
        if torch.equal(newC, C):
            break
        C = newC
    codes, s, o = quantize_codebook(C.to(torch.float32))
    Cq = dequantize_codebook(codes, s, o)
    idx = (x.to(torch.float32)[:, None] - Cq[None]).abs().argmin(1)
    return VecCodebook(idx.to(torch.uint8), codes, s.to(torch.float16), o.to(torch.float16), bits, shape)


def weighted_error(mu: torch.Tensor, q: torch.Tensor, importance: torch.Tensor) -> float:
    """sum_i imp_i (mu_i - q_i)^2: the expected squared output error of the multiplication."""
    return float((importance.reshape(-1) * (mu.reshape(-1) - q.reshape(-1)) ** 2).sum())
