"""Quantized tensors, their exact storage cost in bits, and the dequantize-on-the-fly linear layer.

Three stored forms, each a dataclass of plain tensors so it saves and reloads bit for bit:

- ``SQTensor``: group-wise scalar codes (RTN, GPTQ). ``bits``-bit codes, per (row, group) an fp16
  scale and a ``bits``-bit integer zero point: w = (q - z) * s. Integer zero points keep the
  layout that onnxruntime's MatMulNBits runs.
- ``VQTensor``: ``dim``-dimensional vector codes (GPTVQ). Each block of ``group_rows`` rows x
  ``group_cols`` input columns has a codebook of ``2**(bits*dim)`` centroids stored as 8-bit codes with
  an fp16 scale and offset; each row's ``dim`` consecutive weights are one index. Codebooks are numbered
  column block by column block, row blocks within (``book_of``). Optionally (GPTVQ's blockwise data
  normalisation) every row's run of ``scale_block`` columns inside a column block is scaled: the codebook
  holds normalised weights, w = centroid * s, s stored as a ``scale_bits``-bit code on a log2 grid of
  its block column (an fp16 lowest log2 scale and step per block column, ``log_scales``).
- ``VecCodebook``: a 1-D codebook for a per-channel vector (RWKVQuant's element-wise
  multiplication vectors): ``bits``-bit indices into 2**bits centroids, codebook stored in 8 bit.

``storage_bits()`` counts every stored bit (indices, scales, zero points, codebooks); shapes and
method names are metadata and not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

FP16_BITS = 16
CODEBOOK_BITS = 8


def fp16_round(x: torch.Tensor) -> torch.Tensor:
    """Round to the fp16 grid (the values are stored in fp16), returned as fp32."""
    return x.to(torch.float16).to(torch.float32)


def quantize_codebook(cb: torch.Tensor, bits: int = CODEBOOK_BITS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Affine ``bits``-bit codes for a codebook (any shape): (codes uint8, fp16 scale, fp16 offset) as tensors."""
    lo, hi = cb.min(), cb.max()
    scale = fp16_round(torch.clamp((hi - lo) / (2**bits - 1), min=1e-8)).reshape(1)
    lo = fp16_round(lo).reshape(1)
    codes = torch.clamp(torch.round((cb - lo) / scale), 0, 2**bits - 1).to(torch.uint8)
    return codes, scale, lo


def dequantize_codebook(codes: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    return codes.to(torch.float32) * scale.to(torch.float32) + lo.to(torch.float32)


def quantize_codebooks(cbs: torch.Tensor, bits: int = CODEBOOK_BITS):
    """Affine ``bits``-bit codes of each codebook (G, k, d): (codes uint8, fp16 scales (G,), fp16 offsets (G,))."""
    flat = cbs.reshape(cbs.shape[0], -1).to(torch.float32)
    lo, hi = flat.min(1).values, flat.max(1).values
    scale = torch.clamp((hi - lo) / (2**bits - 1), min=1e-8).to(torch.float16)
    lo16 = lo.to(torch.float16)
    s, o = scale.to(torch.float32)[:, None], lo16.to(torch.float32)[:, None]
    codes = torch.clamp(torch.round((flat - o) / s), 0, 2**bits - 1).to(torch.uint8)
    return codes.reshape(cbs.shape), scale, lo16


def dequantize_codebooks(codes: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """(G, k, d) codebooks from their codes and per-codebook scales and offsets."""
    return codes.to(torch.float32) * scale.to(torch.float32)[:, None, None] + lo.to(torch.float32)[:, None, None]


def scale_block_index(n_in: int, group_cols: int, block: int) -> torch.Tensor:
    """(n_in,) number of the scale block of every input column: runs of ``block`` columns inside each column
    block of ``group_cols`` (a narrower last run where ``block`` does not divide it), numbered left to right."""
    col = torch.arange(n_in)
    per_group = -(-group_cols // block)
    return (col // group_cols) * per_group + (col % group_cols) // block


def quantize_log_scales(s: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Positive scales (rows, blocks) -> (``bits``-bit codes uint8, fp16 lowest log2 scale and fp16 step per
    block column): a uniform grid on log2(s) from each column's smallest scale to its largest. A zero scale
    (an all-zero run) takes its column's smallest positive one (1 when there is none)."""
    s = s.to(torch.float64).clone()
    pos = s > 0
    floor = torch.where(pos, s, torch.full_like(s, float("inf"))).min(0).values
    floor = torch.where(torch.isfinite(floor), floor, torch.ones_like(floor))
    s = torch.where(pos, s, floor.expand_as(s))
    log = torch.log2(s)
    lo = log.min(0).values.to(torch.float16)
    step = ((log.max(0).values - lo.to(torch.float64)) / (2**bits - 1)).to(torch.float16)
    step = torch.where(step > 0, step, torch.ones_like(step))  # one scale in the column: any step is exact
    codes = torch.round((log - lo.to(torch.float64)) / step.to(torch.float64)).clamp(0, 2**bits - 1)
    return codes.to(torch.uint8), lo, step


def dequantize_log_scales(codes: torch.Tensor, lo: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """(rows, blocks) float32 scales 2^(lo + code * step)."""
    return torch.exp2(lo.to(torch.float32) + codes.to(torch.float32) * step.to(torch.float32))


@dataclass
class SQTensor:
    codes: torch.Tensor  # uint8 (out, in)
    scales: torch.Tensor  # fp16 (out, n_groups)
    zeros: torch.Tensor  # uint8 (out, n_groups)
    bits: int
    group_size: int

    kind = "sq"

    def dequantize(self) -> torch.Tensor:
        out, n_in = self.codes.shape
        idx = torch.arange(n_in, device=self.codes.device) // self.group_size
        s = self.scales.to(torch.float32)[:, idx]
        z = self.zeros.to(torch.float32)[:, idx]
        return (self.codes.to(torch.float32) - z) * s

    @property
    def symmetric(self) -> bool:
        """Every zero point is 2^(bits-1): the one a file can leave out (MatMulNBits' default)."""
        return bool(torch.all(self.zeros == 2 ** (self.bits - 1)))

    def storage_bits(self) -> int:
        zero_bits = 0 if self.symmetric else self.zeros.numel() * self.bits
        return self.codes.numel() * self.bits + self.scales.numel() * FP16_BITS + zero_bits

    @property
    def n_weights(self) -> int:
        return self.codes.numel()


@dataclass
class VQTensor:
    indices: torch.Tensor  # int64 (out, in // dim)
    codebook_codes: torch.Tensor  # uint8 (n_groups, K, dim)
    codebook_scale: torch.Tensor  # fp16 (n_groups,)
    codebook_offset: torch.Tensor  # fp16 (n_groups,)
    bits: int  # index bits per weight: K = 2**(bits*dim)
    dim: int
    group_cols: int
    group_rows: int | None = None  # None: one codebook spans all rows (files written before row blocks)
    scale_codes: torch.Tensor | None = None  # uint8 (out, n_scale_blocks); None: no blockwise normalisation
    scale_lo: torch.Tensor | None = None  # fp16 (n_scale_blocks,): log2 of each block column's smallest scale
    scale_step: torch.Tensor | None = None  # fp16 (n_scale_blocks,): its log2 grid step
    scale_bits: int = 0
    scale_block: int = 0

    kind = "vq"

    def scales(self) -> torch.Tensor | None:
        """(out, in) float32 scale of every weight (blockwise normalisation), or None without it."""
        if self.scale_codes is None:
            return None
        n_in = self.indices.shape[1] * self.dim
        per_block = dequantize_log_scales(self.scale_codes, self.scale_lo, self.scale_step)
        return per_block[:, scale_block_index(n_in, self.group_cols, self.scale_block)]

    def book_of(self) -> torch.Tensor:
        """(out, in // dim) index of the codebook of every stored vector."""
        out, n_vec = self.indices.shape
        rows = self.group_rows or out
        col_block = (torch.arange(n_vec, device=self.indices.device) * self.dim) // self.group_cols
        row_block = torch.arange(out, device=self.indices.device) // rows
        return col_block[None, :] * (-(-out // rows)) + row_block[:, None]

    def codebooks(self) -> torch.Tensor:
        return dequantize_codebooks(self.codebook_codes, self.codebook_scale, self.codebook_offset)

    def dequantize(self) -> torch.Tensor:
        out, n_vec = self.indices.shape
        w = self.codebooks()[self.book_of(), self.indices].reshape(out, n_vec * self.dim)
        s = self.scales()
        return w if s is None else w * s

    def storage_bits(self) -> int:
        n_groups, k, d = self.codebook_codes.shape
        index_bits = self.bits * self.dim
        scale_bits = 0 if self.scale_codes is None else (self.scale_codes.numel() * self.scale_bits
                                                         + self.scale_lo.numel() * 2 * FP16_BITS)
        return (self.indices.numel() * index_bits + n_groups * k * d * CODEBOOK_BITS
                + n_groups * 2 * FP16_BITS + scale_bits)

    @property
    def n_weights(self) -> int:
        return self.indices.numel() * self.dim


@dataclass
class VecCodebook:
    indices: torch.Tensor  # uint8 (C,)
    codebook_codes: torch.Tensor  # uint8 (K,)
    codebook_scale: torch.Tensor  # fp16 (1,)
    codebook_offset: torch.Tensor  # fp16 (1,)
    bits: int
    shape: tuple[int, ...]

    kind = "vec"

    def dequantize(self) -> torch.Tensor:
        cb = dequantize_codebook(self.codebook_codes, self.codebook_scale, self.codebook_offset)
        return cb[self.indices.long()].reshape(self.shape)

    def storage_bits(self) -> int:
        return self.indices.numel() * self.bits + self.codebook_codes.numel() * CODEBOOK_BITS + 2 * FP16_BITS

    @property
    def n_weights(self) -> int:
        return self.indices.numel()


QTensor = SQTensor | VQTensor


class QuantLinear(nn.Module):
    """A bias-free linear whose weight lives quantized and is dequantized on every call.

    Keeping only the codes in the module is what lets a quantized model be saved exactly and be
    exported to a low-bit kernel; the fp32 weight is rebuilt transiently for the matmul.
    """

    def __init__(self, q: QTensor, in_features: int, out_features: int):
        super().__init__()
        self.q = q
        self.in_features, self.out_features = in_features, out_features

    @property
    def weight(self) -> torch.Tensor:
        return self.q.dequantize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.q.dequantize().t()

    def extra_repr(self) -> str:
        return (f"{self.in_features}->{self.out_features}, {self.q.kind}, "
                f"{self.q.storage_bits() / self.q.n_weights:.3f} bpw")


# --- bit packing (what the quantized checkpoint stores) ------------------------------------------

def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned integers < 2**bits -> a dense little-endian bitstream of ceil(n*bits/8) bytes."""
    v = np.asarray(values, dtype=np.int64).ravel()
    if v.size and (v.min() < 0 or v.max() >= 2**bits):
        raise ValueError(f"values do not fit in {bits} bits")
    bitplanes = ((v[:, None] >> np.arange(bits)) & 1).astype(np.uint8)
    return np.packbits(bitplanes.ravel(), bitorder="little")


def unpack_bits(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    flat = np.unpackbits(np.asarray(packed, dtype=np.uint8), count=n * bits, bitorder="little")
    return (flat.reshape(n, bits).astype(np.int64) << np.arange(bits)).sum(axis=1)
