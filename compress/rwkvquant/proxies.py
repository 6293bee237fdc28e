"""RWKVQuant's proxies: how non-uniform a weight matrix is, to choose scalar or vector quantization.

Sort the flattened weights, take the adjacent gaps G and normalise them, G' = G / sum G.

- Coarse proxy  P_c = ln(n) - H(G'),  H(G') = -sum G' ln G'   (0 for evenly spaced weights; large
  when a few big gaps, i.e. outliers or clusters, carry the range, where a uniform grid wastes levels).
- Fine proxy    P_f = sum_{k=2..K} n^k / (k(k-1)) * |M_k|,  M_k = mean((G'_i - 1/n)^k)
  (the Taylor expansion of P_c around the uniform case, K = 4 as in the released code).
- Ablation: the released code's default, max|W| * sqrt(numel) / ||W||_F (max over RMS).

Rule (paper): SQ if P_c < tau_c and P_f < tau_f, else VQ; thresholds are set per model at a
percentile of the proxies over its matrices (``thresholds``), so about that share of layers gets SQ.
Everything is computed in float64: P_f multiplies n^4 by fourth moments of ~1/n quantities.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def normalised_gaps(w: torch.Tensor) -> np.ndarray:
    v = np.sort(w.detach().to(torch.float64).reshape(-1).cpu().numpy())
    g = np.diff(v)
    total = g.sum()
    if total <= 0:
        return np.full(len(g), 1.0 / max(len(g), 1))
    return g / total


def coarse_proxy(w: torch.Tensor) -> float:
    g = normalised_gaps(w)
    nz = g[g > 0]
    entropy = float(-(nz * np.log(nz)).sum())
    return math.log(len(g)) - entropy


def fine_proxy(w: torch.Tensor, order: int = 4) -> float:
    g = normalised_gaps(w)
    n = len(g)
    dev = g - 1.0 / n
    total = 0.0
    for k in range(2, order + 1):
        total += (float(n) ** k) / (k * (k - 1)) * abs(float(np.mean(dev**k)))
    return total


def max_over_rms(w: torch.Tensor) -> float:
    w = w.detach().to(torch.float64)
    return float(w.abs().max() * math.sqrt(w.numel()) / torch.linalg.norm(w))


def thresholds(values: list[float], percentile: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), percentile))


def decide(pc: float, pf: float, tau_c: float, tau_f: float) -> tuple[str, str]:
    """("sq" | "vq", reason) by the paper's two-threshold rule."""
    if pc < tau_c and pf < tau_f:
        return "sq", f"P_c={pc:.3f}<{tau_c:.3f} and P_f={pf:.2f}<{tau_f:.2f}: near-uniform weights, scalar grid"
    which = " and ".join(s for s, hit in ((f"P_c={pc:.3f}>={tau_c:.3f}", pc >= tau_c),
                                           (f"P_f={pf:.2f}>={tau_f:.2f}", pf >= tau_f)) if hit)
    return "vq", f"{which}: non-uniform weights, vector codebook"
