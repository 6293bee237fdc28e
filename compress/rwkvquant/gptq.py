"""GPTQ (Frantar et al. 2023): column-by-column scalar quantization with second-order error feedback.

H = 2/n sum x x^T over calibration inputs, damped by ``damp`` x mean(diag H); the upper Cholesky
factor U of H^-1 gives, for each column j, the update that moves the not-yet-quantized columns to
absorb the error of column j: W[:, j+1:] -= (w_j - q_j) / U_jj * U[j, j+1:]. Columns go in lazy
blocks of ``block_size``: errors are applied inside the block at once and to the rest of the
matrix once per block. Group grids (``rtn.group_grid``) are fitted when a group starts, on the
error-updated weights. Also ``prepare_hessian`` and ``hessian_inverse_cholesky``, which GPTVQ shares.
"""
from __future__ import annotations

import torch

from edgesmith.compress.rwkvquant.rtn import dequant_with_grid, group_grid, quantize_with_grid
from edgesmith.compress.rwkvquant.tensors import SQTensor


def prepare_hessian(w: torch.Tensor, H: torch.Tensor, damp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 copies of W and H with dead inputs (zero diagonal) zeroed in W and unit in H, H damped."""
    W = w.detach().to(torch.float64).clone()
    H = H.detach().to(torch.float64).clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    H += torch.eye(H.shape[0], dtype=H.dtype) * damp * torch.mean(torch.diag(H))
    return W, H


def hessian_inverse_cholesky(H: torch.Tensor) -> torch.Tensor:
    """Upper Cholesky factor U of H^-1 (H^-1 = U^T U); retries with more damping if H is singular."""
    eye = torch.eye(H.shape[0], dtype=H.dtype)
    for extra in (0.0, 1e-6, 1e-4, 1e-2, 1e-1):
        try:
            L = torch.linalg.cholesky(H + eye * extra * torch.mean(torch.diag(H)))
            Hinv = torch.cholesky_inverse(L)
            return torch.linalg.cholesky(Hinv, upper=True)
        except RuntimeError:
            continue
    raise RuntimeError("the calibration Hessian is not positive definite even with 10% damping")


def gptq_quantize(w: torch.Tensor, H: torch.Tensor, bits: int, group_size: int, *, damp: float = 0.01,
                  block_size: int = 128) -> SQTensor:
    """GPTQ of a (out, in) weight with the (in, in) input Hessian ``H``."""
    W, H = prepare_hessian(w, H, damp)
    U = hessian_inverse_cholesky(H)
    out, n_in = W.shape
    codes = torch.zeros(out, n_in, dtype=torch.float64)
    scales, zeros = [], []
    scale = zero = None
    for b0 in range(0, n_in, block_size):
        b1 = min(b0 + block_size, n_in)
        Wb, Ub = W[:, b0:b1].clone(), U[b0:b1, b0:b1]
        Err = torch.zeros_like(Wb)
        for j in range(b1 - b0):
            col = b0 + j
            if col % group_size == 0:  # the group's grid comes from the weights as updated so far
                g_end = min(col + group_size, n_in)
                cur = torch.cat([Wb[:, j:], W[:, b1:g_end]], dim=1)[:, : g_end - col]
                scale, zero = (t.to(torch.float64) for t in group_grid(cur.to(torch.float32), bits))
                scales.append(scale), zeros.append(zero)
            q = quantize_with_grid(Wb[:, j:j + 1], scale, zero, bits)
            codes[:, col] = q[:, 0]
            err = (Wb[:, j] - dequant_with_grid(q, scale, zero)[:, 0]) / Ub[j, j]
            Wb[:, j:] -= err[:, None] * Ub[j, j:][None, :]
            Err[:, j] = err
        W[:, b1:] -= Err @ U[b0:b1, b1:]
    return SQTensor(codes.to(torch.uint8), torch.stack(scales, 1).to(torch.float16),
                    torch.stack(zeros, 1).to(torch.uint8), bits, group_size)
