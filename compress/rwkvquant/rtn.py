"""Round-to-nearest, group-wise asymmetric scalar quantization (the SQ baseline and GPTQ's grid).

Per row and group of ``group_size`` input columns: s = (max - min) / (2^b - 1) stored in fp16,
z = round(-min / s) clamped to [0, 2^b - 1], q = clamp(round(w / s) + z). The scale is rounded to
fp16 *before* the codes are chosen, so dequantizing the stored values gives exactly the weight the
quantizer evaluated.
"""
from __future__ import annotations

import torch

from edgesmith.compress.rwkvquant.tensors import SQTensor, fp16_round


def group_grid(w: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale (fp16-exact, fp32) and integer zero point for each row of ``w`` (rows, cols)."""
    maxq = 2**bits - 1
    lo = torch.clamp(w.min(dim=1).values, max=0.0)
    hi = torch.clamp(w.max(dim=1).values, min=0.0)
    scale = fp16_round(torch.clamp((hi - lo) / maxq, min=1e-8))
    zero = torch.clamp(torch.round(-lo / scale), 0, maxq)
    return scale, zero


def quantize_with_grid(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Integer codes of ``w`` (rows, cols) on a per-row grid."""
    return torch.clamp(torch.round(w / scale[:, None]) + zero[:, None], 0, 2**bits - 1)


def dequant_with_grid(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    return (q - zero[:, None]) * scale[:, None]


def rtn_quantize(w: torch.Tensor, bits: int, group_size: int) -> SQTensor:
    """Round-to-nearest of a (out, in) weight, one grid per row and group."""
    w = w.detach().to(torch.float32)
    out, n_in = w.shape
    codes = torch.empty(out, n_in)
    scales, zeros = [], []
    for g0 in range(0, n_in, group_size):
        blk = w[:, g0:g0 + group_size]
        s, z = group_grid(blk, bits)
        codes[:, g0:g0 + group_size] = quantize_with_grid(blk, s, z, bits)
        scales.append(s), zeros.append(z)
    return SQTensor(codes.to(torch.uint8), torch.stack(scales, 1).to(torch.float16),
                    torch.stack(zeros, 1).to(torch.uint8), bits, group_size)
