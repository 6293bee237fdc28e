"""GPTVQ (van Baalen et al. 2024, "GPTVQ: The Blessing of Dimensionality for LLM Quantization").

As the paper and its released code (Qualcomm-AI-research/gptvq, the settings of its result scripts) do it:

- Weights are cut into ``dim``-long vectors along the input axis. The matrix is walked in column groups of
  ``columns`` input columns (the paper: 256); when a column group starts, its codebooks are fitted on the
  weights as the earlier groups' error feedback left them, one codebook per block of rows
  (``group_size / columns`` rows, so each codebook serves about ``group_size`` weights), all of a column
  group's codebooks at once.
- A codebook has ``2**(bits*dim)`` centroids: Mahalanobis initialisation (the vectors sorted by their
  Mahalanobis distance to their mean, centroids taken at evenly spaced ranks), then EM (k-means) weighted by
  the Hessian importance of each coordinate, at most ``iters`` iterations (the paper: 100; this code also stops
  once no assignment changes), then the codebook is stored in 8 bit.
- Then, ``dim`` columns at a time, each row picks the nearest centroid of its codebook in the same weighted
  metric, and the error is fed back GPTQ-style onto the columns not yet quantized, lazily per column group.
- Codebook update (the paper's "M-step" after quantization): with the assignments fixed, the centroids are
  moved to lower the layer's output error ``tr((W - Q) H (W - Q)^T)`` (conjugate gradient with exact line
  search on this quadratic; the released code takes 25 Adam steps), and stored in 8 bit again; kept only if the
  error fell.

Where this code differs from the released one, deliberately: the importance weight of a coordinate is
``1 / U_jj^2`` (U the upper Cholesky factor of H^-1: the scale of the quantization error GPTQ's update
divides by), in both the EM and the lookups; the released code passes ``U_jj`` to the EM and ``1 / U_jj`` to
the lookups. The error of a vector is fed back through the ``dim x dim`` block of U
(``E = (W_b - Q_b) U_bb^-1``, the exact joint update) where the released code divides each column by its own
``U_jj``. The codebook is stored as affine 8-bit codes with an fp16 scale and offset (the released code:
symmetric 8-bit). Optional part of the paper not built here: SVD compression of codebooks.

Blockwise data normalisation (the paper's section 3.3, the released code's ``--vq-scaling-blocksize``;
``scale_block`` > 0 turns it on): when a column group starts, each row's run of ``scale_block`` columns is
divided by its largest magnitude, that scale stored as a ``scale_bits``-bit code on a uniform log2 grid
spanning its block column's scales (the released code's defaults: max norm, 4 bits, log domain); the
codebooks are fitted on, and the lookups done in, the normalised weights, and a weight is its centroid times
its scale. Deliberately unlike the released code: a coordinate's importance in the EM is ``s^2 / U_jj^2``
(the error of a normalised weight costs s^2 times more in the layer's output), the lookups normalise the
weights as the error feedback left them (the released code looks up the block's copy scaled before the
feedback inside the block), and the codebook update moves the centroids under their scales.
"""
from __future__ import annotations

import dataclasses

import numba
import numpy as np
import torch

from edgesmith.compress.rwkvquant.gptq import damp_, hessian_inverse_cholesky, prepare_hessian
from edgesmith.compress.rwkvquant.tensors import (VQTensor, dequantize_codebooks, dequantize_log_scales,
                                                  quantize_codebooks, quantize_log_scales, scale_block_index)

COLUMNS = 256  # the paper's columns per group


def vq_layout(rows: int, n_in: int, dim: int, group_size: int, columns: int = COLUMNS) -> tuple[int, int]:
    """(columns, rows) of one codebook's block of weights: column groups of at most ``columns`` columns of
    even width (a multiple of ``dim``), split into row blocks of even height so that the number of codebooks
    is the nearest whole number to rows * n_in / ``group_size`` per column group (at least one). Even blocks
    keep the codebook overhead at its target: a narrow last block would pay a full codebook."""
    n_vec = max(n_in // dim, 1)
    n_col_groups = -(-n_in // max(columns, dim))
    width = -(-n_vec // n_col_groups) * dim
    n_row_groups = int(min(rows, max(1, round(rows * width / group_size))))
    return min(width, n_in), -(-rows // n_row_groups)


@numba.njit(cache=True)
def _mahalanobis_init(x: np.ndarray, k: int) -> np.ndarray:
    """k centroids (k, d) of the vectors x (n, d): the vectors at evenly spaced ranks of Mahalanobis distance."""
    n, d = x.shape
    mu = np.zeros(d)
    for i in range(n):
        for c in range(d):
            mu[c] += x[i, c]
    mu /= max(n, 1)
    xc = np.empty((n, d))
    for i in range(n):
        for c in range(d):
            xc[i, c] = x[i, c] - mu[c]
    sigma = np.zeros((d, d))
    for i in range(n):
        for a in range(d):
            for b in range(d):
                sigma[a, b] += xc[i, a] * xc[i, b]
    ridge = 1e-12 * (np.trace(sigma) + 1e-30)  # constant or collinear vectors: a tiny ridge keeps it invertible
    lam = np.linalg.inv(sigma + ridge * np.eye(d))
    dist = np.empty(n)
    for i in range(n):
        s = 0.0
        for a in range(d):
            for b in range(d):
                s += xc[i, a] * lam[a, b] * xc[i, b]
        dist[i] = s
    order = np.argsort(dist, kind="mergesort")
    out = np.empty((k, d))
    for j in range(k):
        pick = order[int(np.rint(j * (n - 1) / max(k - 1, 1)))] if n > 0 else 0
        for c in range(d):
            out[j, c] = x[pick, c]
    return out


@numba.njit(cache=True, inline="always")
def _nearest_centroid(x: np.ndarray, wt: np.ndarray, cb: np.ndarray, dist: np.ndarray) -> int:
    """Index of the centroid of ``cb`` (d, k) nearest to the vector x (d,) in the metric weighted by wt (d,);
    ``dist`` (k,) is scratch space, and its dtype is the arithmetic's."""
    dist[:] = 0.0
    for c in range(cb.shape[0]):
        xv, wv = x[c], wt[c]
        for j in range(cb.shape[1]):
            t = xv - cb[c, j]
            dist[j] += wv * t * t
    best = 0
    for j in range(1, cb.shape[1]):
        if dist[j] < dist[best]:
            best = j
    return best


@numba.njit(parallel=True, cache=True)
def _fit_codebooks(x: np.ndarray, wt: np.ndarray, starts: np.ndarray, k: int, iters: int) -> tuple:
    """Codebooks (G, d, k) and iterations run per codebook, for the vectors x[starts[g]:starts[g+1]] (n, d),
    each coordinate weighted by wt (n, d): Mahalanobis initialisation, then weighted EM until no assignment
    changes or ``iters`` iterations. Codebooks are independent: the parallel loop is deterministic."""
    n_groups = starts.shape[0] - 1
    d = x.shape[1]
    x32, wt32 = x.astype(np.float32), wt.astype(np.float32)  # the E-step in float32: twice the SIMD lanes
    cbs = np.empty((n_groups, d, k))
    ran = np.zeros(n_groups, np.int64)
    for g in numba.prange(n_groups):
        a, b = starts[g], starts[g + 1]
        init = _mahalanobis_init(x[a:b], k)
        cb = np.empty((d, k))
        for j in range(k):
            for c in range(d):
                cb[c, j] = init[j, c]
        assign = np.full(b - a, -1, np.int64)
        dist = np.empty(k, np.float32)  # the M-step's sums stay float64
        num = np.empty((d, k))
        den = np.empty((d, k))
        for it in range(iters):
            changed = 0
            cb32 = cb.astype(np.float32)
            for i in range(a, b):
                best = _nearest_centroid(x32[i], wt32[i], cb32, dist)
                if assign[i - a] != best:
                    assign[i - a] = best
                    changed += 1
            if changed == 0:
                break
            ran[g] = it + 1
            num[:] = 0.0
            den[:] = 0.0
            for i in range(a, b):
                j = assign[i - a]
                for c in range(d):
                    num[c, j] += wt[i, c] * x[i, c]
                    den[c, j] += wt[i, c]
            for c in range(d):
                for j in range(k):
                    if den[c, j] > 0:
                        cb[c, j] = num[c, j] / den[c, j]
        cbs[g] = cb
    return cbs, ran


@numba.njit(parallel=True, cache=True)
def _quantize_columns(wb: np.ndarray, ub: np.ndarray, imp: np.ndarray, cbs: np.ndarray, book: np.ndarray,
                      sc: np.ndarray, err: np.ndarray, idx: np.ndarray) -> None:
    """One column group, ``dim`` columns at a time: each row takes the centroid of its codebook
    ``cbs[book[r]]`` (d, k) nearest to its weights divided by their scales ``sc`` (ones without
    normalisation; one scale per vector) in the metric ``imp``; q = centroid * scale; the error
    ``e = (w - q) U_bb^-1`` (``U_bb`` the d x d diagonal block of ``ub``, upper triangular: solved by
    substitution) goes onto the row's later columns, ``wb`` ends quantized, ``err`` holds e.
    Rows never touch each other in GPTQ's update, so the parallel loop over rows is deterministic."""
    rows, width = wb.shape
    d, k = cbs.shape[1], cbs.shape[2]
    for r in numba.prange(rows):
        cb = cbs[book[r]]
        dist = np.empty(k)
        e = np.empty(d)
        x = np.empty(d)
        for j in range(0, width, d):
            for c in range(d):
                x[c] = wb[r, j + c] / sc[r, j + c]
            best = _nearest_centroid(x, imp[j:j + d], cb, dist)
            idx[r, j // d] = best
            for c in range(d):  # e U_bb = w - q, U_bb upper triangular
                s = wb[r, j + c] - cb[c, best] * sc[r, j + c]
                for t in range(c):
                    s -= e[t] * ub[j + t, j + c]
                e[c] = s / ub[j + c, j + c]
            for c in range(d):
                err[r, j + c] = e[c]
                wb[r, j + c] = cb[c, best] * sc[r, j + c]
            for col in range(j + d, width):
                s = 0.0
                for t in range(d):
                    s += e[t] * ub[j + t, col]
                wb[r, col] -= s


def _output_error(w0: torch.Tensor, q: torch.Tensor, H: torch.Tensor) -> float:
    r = q - w0
    return float(((r @ H) * r).sum())


def update_codebooks(q: VQTensor, w0: torch.Tensor, H: torch.Tensor, steps: int) -> tuple[VQTensor, dict]:
    """The paper's codebook update: centroids moved, assignments fixed, to lower tr((W0 - Q) H (W0 - Q)^T)
    (``steps`` conjugate-gradient steps with exact line search; the error is quadratic in the centroids),
    stored in 8 bit again; the new codebooks are kept only if the stored ones lower the error."""
    w0, H = w0.to(torch.float32), H.to(torch.float32)  # fp32: the products with H are the cost
    book = q.book_of().reshape(-1)  # codebook of each stored vector, row-major
    flat_idx = book * q.codebook_codes.shape[1] + q.indices.reshape(-1)
    n_books, k, d = q.codebook_codes.shape
    out, n_in = w0.shape
    S = q.scales()  # the weights' scales (blockwise normalisation): Q = gather(centroids) * S

    def gather(c: torch.Tensor) -> torch.Tensor:
        g = c.reshape(-1, d)[flat_idx].reshape(out, n_in)
        return g if S is None else g * S

    def scatter(g: torch.Tensor) -> torch.Tensor:  # the adjoint of gather
        g = g if S is None else g * S
        return torch.zeros(n_books * k, d, dtype=g.dtype).index_add_(0, flat_idx, g.reshape(-1, d)).reshape(n_books, k, d)

    cb = q.codebooks()
    r = gather(cb) - w0
    rh = r @ H
    before = float((rh * r).sum())
    grad = scatter(2 * rh)
    p, prev = -grad, None
    for _ in range(steps):
        dq = gather(p)
        dqh = dq @ H
        curv = float((dqh * dq).sum())
        slope = float((grad * p).sum())
        if curv <= 0 or slope >= 0:
            break
        alpha = -slope / (2 * curv)
        cb, rh = cb + alpha * p, rh + alpha * dqh
        prev, grad = grad, scatter(2 * rh)
        beta = max(0.0, float((grad * (grad - prev)).sum()) / max(float((prev * prev).sum()), 1e-300))
        p = -grad + beta * p
    codes, scale, lo = quantize_codebooks(cb)
    after = _output_error(w0, gather(dequantize_codebooks(codes, scale, lo)), H)
    info = {"error_before": before, "error_after": min(before, after), "kept": after < before}
    if after >= before:
        return q, info
    return dataclasses.replace(q, codebook_codes=codes, codebook_scale=scale, codebook_offset=lo), info


def gptvq_quantize(w: torch.Tensor, H: torch.Tensor, bits: int, *, dim: int = 2, group_size: int = 4096,
                   columns: int = COLUMNS, damp: float = 0.01, iters: int = 100,
                   codebook_update_steps: int = 5, scale_block: int = 0, scale_bits: int = 4) -> VQTensor:
    """GPTVQ of a (out, in) weight with the (in, in) input Hessian; ``bits`` index bits per weight
    (2**(bits*dim) centroids per codebook), about ``group_size`` weights per codebook; ``scale_block`` > 0:
    blockwise data normalisation over runs of that many columns, scales in ``scale_bits`` bits (see the module)."""
    out, n_in = w.shape
    if n_in % dim:
        raise ValueError(f"input width {n_in} is not a multiple of the VQ dimension {dim}")
    if scale_block and scale_block % dim:
        raise ValueError(f"the normalisation block {scale_block} is not a multiple of the VQ dimension {dim}")
    W0, H0 = prepare_hessian(w, H, 0.0)  # the output error the codebook update lowers: undamped H
    W = W0.clone()  # the column loop's working copy (prepare_hessian(w, H, damp) without a second conversion)
    U = hessian_inverse_cholesky(damp_(H0.clone(), damp))
    imp = (1.0 / torch.diag(U) ** 2).numpy()
    k = 2 ** (bits * dim)
    gc, gr = vq_layout(out, n_in, dim, group_size, columns)
    n_row_books = -(-out // gr)
    book = np.arange(out) // gr  # the codebook (within a column group) of each row
    indices = torch.zeros(out, n_in // dim, dtype=torch.int64)
    codes_all, scale_all, lo_all = [], [], []
    sblock = scale_block_index(n_in, gc, scale_block).numpy() if scale_block else None
    s_codes, s_lo, s_step = [], [], []
    for g0 in range(0, n_in, gc):
        g1 = min(g0 + gc, n_in)
        nv = (g1 - g0) // dim
        Wb, Ub = W[:, g0:g1].clone(), U[g0:g1, g0:g1]
        sc = np.ones((out, g1 - g0))
        if scale_block:  # each row's run's largest magnitude, as the earlier groups' feedback left the weights
            local = torch.from_numpy(sblock[g0:g1] - sblock[g0])
            peak = torch.zeros(out, int(local[-1]) + 1, dtype=torch.float64)
            peak.scatter_reduce_(1, local.expand(out, -1), Wb.abs(), "amax")
            c, lo, step = quantize_log_scales(peak, scale_bits)
            s_codes.append(c), s_lo.append(lo), s_step.append(step)
            sc = dequantize_log_scales(c, lo, step).to(torch.float64)[:, local].numpy()
        x = (Wb.numpy() / sc).reshape(out * nv, dim)  # row-major: a row block's vectors are one contiguous run
        wt = np.tile(imp[g0:g1].reshape(nv, dim), (out, 1)) * (sc**2).reshape(out * nv, dim)
        starts = np.minimum(np.arange(n_row_books + 1) * gr, out) * nv
        cbs, _ = _fit_codebooks(x, wt, starts.astype(np.int64), k, iters)
        codes, scale, lo = quantize_codebooks(torch.from_numpy(cbs).transpose(1, 2))
        codes_all.append(codes), scale_all.append(scale), lo_all.append(lo)
        cq = dequantize_codebooks(codes, scale, lo).to(torch.float64)  # (books, k, d)
        cq_t = np.ascontiguousarray(cq.transpose(1, 2).numpy())
        wb, err = np.ascontiguousarray(Wb.numpy()), np.zeros((out, g1 - g0))
        idx = np.zeros((out, nv), np.int64)
        _quantize_columns(wb, np.ascontiguousarray(Ub.numpy()), np.ascontiguousarray(imp[g0:g1]), cq_t, book,
                          np.ascontiguousarray(sc), err, idx)
        indices[:, g0 // dim:g1 // dim] = torch.from_numpy(idx)
        Wb, Err = torch.from_numpy(wb), torch.from_numpy(err)
        W[:, g0:g1] = Wb
        W[:, g1:] -= Err @ U[g0:g1, g1:]
    q = VQTensor(indices, torch.cat(codes_all), torch.cat(scale_all), torch.cat(lo_all), bits, dim, gc, gr)
    if scale_block:
        q = dataclasses.replace(q, scale_codes=torch.cat(s_codes, 1), scale_lo=torch.cat(s_lo),
                                scale_step=torch.cat(s_step), scale_bits=scale_bits, scale_block=scale_block)
    if codebook_update_steps > 0:
        q, _ = update_codebooks(q, W0, H0, codebook_update_steps)
    return q
