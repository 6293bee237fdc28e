"""GPTVQ (van Baalen et al. 2024): vector quantization with GPTQ-style second-order error feedback.

Weights are cut into ``dim``-long vectors along the input axis. Each group of ``group_cols`` input
columns (all rows) gets its own codebook of 2**(bits*dim) centroids, fitted by k-means weighted
by the Hessian importance of each coordinate (1 / [U]_jj^2, the inverse of the OBS error scale,
U the upper Cholesky factor of H^-1), initialised by weighted k-means++ (seeded), and stored in 8
bit. Then, ``dim`` columns at a time, each row picks the centroid nearest in that weighted metric,
and the joint error of the ``dim`` columns is pushed onto the remaining columns:
E = (W_b - Q_b) U_bb^-1;  W[:, rest] -= E U[b, rest]   (the block form of GPTQ's update).
"""
from __future__ import annotations

import torch

from edgesmith.compress.rwkvquant.gptq import hessian_inverse_cholesky, prepare_hessian
from edgesmith.compress.rwkvquant.tensors import VQTensor, dequantize_codebook, quantize_codebook


def weighted_kmeans(x: torch.Tensor, wt: torch.Tensor, k: int, iters: int, gen: torch.Generator) -> torch.Tensor:
    """Centroids (k, d) minimising sum_n sum_c wt_nc (x_nc - C_{a(n),c})^2; x, wt: (n, d)."""
    n, d = x.shape
    k = min(k, n)
    # weighted k-means++ seeding: deterministic given the generator
    cent = [x[torch.randint(n, (1,), generator=gen)].squeeze(0)]
    dist = ((x - cent[0]) ** 2 * wt).sum(1)
    for _ in range(1, k):
        p = dist.clamp(min=0)
        idx = torch.multinomial(p / p.sum(), 1, generator=gen) if p.sum() > 0 else torch.randint(n, (1,), generator=gen)
        cent.append(x[idx].squeeze(0))
        dist = torch.minimum(dist, ((x - cent[-1]) ** 2 * wt).sum(1))
    C = torch.stack(cent)
    for _ in range(iters):
        a = assign(x, wt, C)
        num = torch.zeros(k, d, dtype=x.dtype).index_add_(0, a, x * wt)
        den = torch.zeros(k, d, dtype=x.dtype).index_add_(0, a, wt)
        upd = den > 0
        newC = torch.where(upd, num / den.clamp(min=1e-30), C)
        if torch.allclose(newC, C, rtol=0, atol=1e-10):
            break
        C = newC
    return C


def assign(x: torch.Tensor, wt: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Index of the nearest centroid for each row of x in the metric weighted by wt."""
    x, wt, C = x.to(torch.float32), wt.to(torch.float32), C.to(torch.float32)
    best = torch.full((x.shape[0],), float("inf"))
    idx = torch.zeros(x.shape[0], dtype=torch.int64)
    for c0 in range(0, C.shape[0], 64):  # chunks keep the (n, chunk, d) temporary small
        d2 = (((x[:, None, :] - C[None, c0:c0 + 64, :]) ** 2) * wt[:, None, :]).sum(-1)
        val, arg = d2.min(dim=1)
        better = val < best
        best = torch.where(better, val, best)
        idx = torch.where(better, arg + c0, idx)
    return idx


def vq_group_cols(rows: int, n_in: int, dim: int, group_size: int) -> int:
    """Columns per codebook (a multiple of ``dim``): the width whose codebook count is nearest to
    rows * n_in / ``group_size`` (at least one codebook; a tie goes to fewer
    codebooks, then to the narrowest width, which makes the groups the most even).

    Choosing by codebook count keeps the codebook overhead of the whole matrix at its target:
    rounding the width instead can leave a narrow last group that pays for a full codebook (at 4
    bits a 128-wide matrix got 104 + 24 columns, two codebooks where 1.24 were budgeted).
    """
    n_vec = max(n_in // dim, 1)
    budget = max(1.0, rows * n_in / group_size)
    count = lambda c: -(-n_vec // c)  # noqa: E731
    width = min(range(1, n_vec + 1), key=lambda c: (abs(count(c) - budget), count(c), c))  # narrowest: even groups
    return min(width * dim, n_in)


def gptvq_quantize(w: torch.Tensor, H: torch.Tensor, bits: int, *, dim: int = 2, group_size: int = 4096,
                   damp: float = 0.01, iters: int = 50, seed: int = 0) -> VQTensor:
    """GPTVQ of a (out, in) weight; ``bits`` index bits per weight (2**(bits*dim) centroids per codebook)."""
    out, n_in = w.shape
    if n_in % dim:
        raise ValueError(f"input width {n_in} is not a multiple of the VQ dimension {dim}")
    W, H = prepare_hessian(w, H, damp)
    U = hessian_inverse_cholesky(H)
    imp = 1.0 / torch.diag(U) ** 2
    k = 2 ** (bits * dim)
    gc = vq_group_cols(out, n_in, dim, group_size)
    gen = torch.Generator().manual_seed(seed)
    indices = torch.zeros(out, n_in // dim, dtype=torch.int64)
    cb_codes, cb_scale, cb_off = [], [], []
    for g0 in range(0, n_in, gc):
        g1 = min(g0 + gc, n_in)
        x = W[:, g0:g1].reshape(-1, dim).to(torch.float32)
        wt = imp[g0:g1].repeat(out).reshape(-1, dim).to(torch.float32)
        C = weighted_kmeans(x, wt, k, iters, gen)
        if C.shape[0] < k:  # fewer vectors than centroids: pad with copies (never chosen twice)
            C = torch.cat([C, C[:1].expand(k - C.shape[0], -1)])
        codes, s, o = quantize_codebook(C.to(torch.float32))
        cb_codes.append(codes), cb_scale.append(s), cb_off.append(o)
        Cq = dequantize_codebook(codes, s, o).to(torch.float64)
        for j in range(g0, g1, dim):
            blk = W[:, j:j + dim]
            a = assign(blk, imp[j:j + dim].expand(out, -1), Cq)
            Q = Cq[a]
            indices[:, j // dim] = a
            E = torch.linalg.solve_triangular(U[j:j + dim, j:j + dim], blk - Q, upper=True, left=False)
            W[:, j + dim:] -= E @ U[j:j + dim, j + dim:]
            W[:, j:j + dim] = Q
    return VQTensor(indices, torch.stack(cb_codes), torch.cat(cb_scale).to(torch.float16),
                    torch.cat(cb_off).to(torch.float16), bits, dim, gc)
