"""Round-to-nearest, group-wise scalar quantization (the SQ baseline and GPTQ's grid).

Per row and group of ``group_size`` input columns: s = (max - min) / (2^b - 1) stored in fp16,
z = round(-min / s) clamped to [0, 2^b - 1], q = clamp(round(w / s) + z). Symmetric (the reference
GPTQ quantizer's ``sym``): min = -max|w|, so s = 2 max|w| / (2^b - 1) and z = 2^(b-1) for every group,
a zero point no file needs to store (MatMulNBits' default). The scale is rounded to fp16 *before* the
codes are chosen, so dequantizing the stored values gives exactly the weight the quantizer evaluated.
"""
from __future__ import annotations

import torch

from edgesmith.compress.rwkvquant.tensors import SQTensor, fp16_round


def group_grid(w: torch.Tensor, bits: int, symmetric: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale (fp16-exact, fp32) and integer zero point for each row of ``w`` (rows, cols)."""
    maxq = 2**bits - 1
    hi = torch.clamp(w.max(dim=1).values, min=0.0)
    lo = torch.clamp(w.min(dim=1).values, max=0.0)
    # An all-zero row (a zero-initialised projection) gets the grid [-1, 1], as the reference GPTQ's quantizer
    # does: its codes then dequantize to exactly 0. Its range would give a scale below fp16's smallest value,
    # 0 after rounding, and 0 / 0 codes, NaN in GPTQ's error feedback.
    empty = (hi == 0) & (lo == 0)
    hi, lo = torch.where(empty, 1.0, hi), torch.where(empty, -1.0, lo)
    if symmetric:
        hi = torch.maximum(hi, -lo)
        scale = fp16_round(torch.clamp(2 * hi / maxq, min=1e-8))
        return scale, torch.full_like(scale, float(2 ** (bits - 1)))
    scale = fp16_round(torch.clamp((hi - lo) / maxq, min=1e-8))
    zero = torch.clamp(torch.round(-lo / scale), 0, maxq)
    return scale, zero


def quantize_with_grid(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Integer codes of ``w`` (rows, cols) on a per-row grid."""
    return torch.clamp(torch.round(w / scale[:, None]) + zero[:, None], 0, 2**bits - 1)


def dequant_with_grid(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    return (q - zero[:, None]) * scale[:, None]


def rtn_quantize(w: torch.Tensor, bits: int, group_size: int, symmetric: bool = False) -> SQTensor:
    """Round-to-nearest of a (out, in) weight, one grid per row and group."""
    w = w.detach().to(torch.float32)
    out, n_in = w.shape
    codes = torch.empty(out, n_in)
    scales, zeros = [], []
    for g0 in range(0, n_in, group_size):
        blk = w[:, g0:g0 + group_size]
        s, z = group_grid(blk, bits, symmetric)
        codes[:, g0:g0 + group_size] = quantize_with_grid(blk, s, z, bits)
        scales.append(s), zeros.append(z)
    return SQTensor(codes.to(torch.uint8), torch.stack(scales, 1).to(torch.float16),
                    torch.stack(zeros, 1).to(torch.uint8), bits, group_size)
