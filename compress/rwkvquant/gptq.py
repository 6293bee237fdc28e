"""GPTQ (Frantar et al. 2023): column-by-column scalar quantization with second-order error feedback.

H = 2/n sum x x^T over calibration inputs, damped by ``damp`` x mean(diag H); the upper Cholesky
factor U of H^-1 gives, for each column j, the update that moves the not-yet-quantized columns to
absorb the error of column j: W[:, j+1:] -= (w_j - q_j) / U_jj * U[j, j+1:]. Columns go in lazy
blocks of ``block_size``: errors are applied inside the block at once and to the rest of the
matrix once per block. This is the reference loop (IST-DASLab ``gptq.py``, ``fasterquant``) step for step:
a group's grid (``rtn.group_grid``, the reference quantizer's asymmetric min/max grid with 0 inside the
range; its scale rounded to fp16, the precision it is stored and run in) is fitted when the group starts, on
the weights as the previous blocks left them, not on the columns already updated inside the current block
(the reference fits on ``W``, while the block works on its copy ``W1``). Options as published:
``static_groups`` fits every group's grid on the original weights before any update; ``act_order`` takes the
columns in order of decreasing Hessian diagonal (with static groups, so that each stored group stays a run
of adjacent columns: the step graph's format has no per-column group index); ``symmetric`` is the reference
quantizer's ``sym`` grid (zero point 2^(b-1) everywhere, none stored). ``tests/compress/rwkvquant``
pins the codes to a transcription of the reference loop. Also ``prepare_hessian`` and
``hessian_inverse_cholesky``, which GPTVQ shares.
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
    return W, damp_(H, damp)


def damp_(H: torch.Tensor, damp: float) -> torch.Tensor:
    """Add ``damp`` times the mean diagonal to H's diagonal, in place; returns H."""
    H.diagonal().add_(damp * torch.mean(torch.diag(H)))
    return H


def hessian_inverse_cholesky(H: torch.Tensor) -> torch.Tensor:
    """Upper Cholesky factor U of H^-1 (H^-1 = U^T U); retries with more damping if H is singular."""
    for extra in (0.0, 1e-6, 1e-4, 1e-2, 1e-1):
        try:
            L = torch.linalg.cholesky(damp_(H.clone(), extra))
            Hinv = torch.cholesky_inverse(L)
            return torch.linalg.cholesky(Hinv, upper=True)
        except RuntimeError:
            continue
    raise RuntimeError("the calibration Hessian is not positive definite even with 10% damping")


def gptq_quantize(w: torch.Tensor, H: torch.Tensor, bits: int, group_size: int, *, damp: float = 0.01,
                  block_size: int = 128, act_order: bool = False, static_groups: bool = False,
                  symmetric: bool = False) -> SQTensor:
    """GPTQ of a (out, in) weight with the (in, in) input Hessian ``H`` (the reference loop; see the module)."""
    W, H = prepare_hessian(w, H, damp)
    out, n_in = W.shape
    if act_order and not static_groups and group_size < n_in:
        raise ValueError("act_order with groups needs static_groups (stored groups are runs of adjacent columns)")

    def fit(c0: int) -> tuple[torch.Tensor, torch.Tensor]:  # the grid of the group starting at column c0 of W now
        return tuple(t.to(torch.float64) for t in group_grid(W[:, c0:c0 + group_size].to(torch.float32), bits, symmetric))

    static = [fit(g) for g in range(0, n_in, group_size)] if static_groups else None
    perm = torch.argsort(torch.diag(H), descending=True) if act_order else torch.arange(n_in)
    W, H = W[:, perm], H[perm][:, perm]
    U = hessian_inverse_cholesky(H)
    codes = torch.zeros(out, n_in, dtype=torch.float64)
    grids = list(static) if static else []
    scale = zero = None
    for b0 in range(0, n_in, block_size):
        b1 = min(b0 + block_size, n_in)
        Wb, Ub = W[:, b0:b1].clone(), U[b0:b1, b0:b1]
        Err = torch.zeros_like(Wb)
        for j in range(b1 - b0):
            col = b0 + j  # position in the (possibly permuted) order
            if static:
                scale, zero = static[int(perm[col]) // group_size]
            elif col % group_size == 0:  # fitted on W as the earlier blocks left it (the reference's W, not W1)
                scale, zero = fit(col)
                grids.append((scale, zero))
            q = quantize_with_grid(Wb[:, j:j + 1], scale, zero, bits)
            codes[:, int(perm[col])] = q[:, 0]
            err = (Wb[:, j] - dequant_with_grid(q, scale, zero)[:, 0]) / Ub[j, j]
            Wb[:, j:] -= err[:, None] * Ub[j, j:][None, :]
            Err[:, j] = err
        W[:, b1:] -= Err @ U[b0:b1, b1:]
    return SQTensor(codes.to(torch.uint8), torch.stack([g[0] for g in grids], 1).to(torch.float16),
                    torch.stack([g[1] for g in grids], 1).to(torch.uint8), bits, group_size)
