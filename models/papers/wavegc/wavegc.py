"""WaveGC layers: learned graph wavelets from odd/even Chebyshev terms, and a GCN of the same shape.

Following the paper (and the authors' public code, liun-online/WaveGC, read for the equations):

- Chebyshev terms of ``y = lambda - 1`` (normalised-Laplacian eigenvalues lie in [0, 2]).
- Scaling function ``h(lambda) = sum_k a_k 1/2 (1 - T_{2k-1}(lambda - 1))``: every odd term is -1
  at ``lambda = 0``, so with coefficients normalised to sum 1, ``h(0) = 1`` (low pass).
- Wavelets ``g_j(lambda) = sum_k b_k 1/2 (1 - T_{2k}(s_j lambda - 1))``: every even term is +1 at
  ``lambda = 0``, so ``g_j(0) = 0`` for any coefficients: the admissibility condition. ``s_j`` is a
  learned scale in ``(0, s_max)``; where ``s_j lambda > 2`` the wavelet is set to 0 (the authors
  zero the argument, which gives the same value for admissible wavelets; the ablation with
  ``admissible=False`` uses odd terms for the wavelets too, so ``g_j(0) = 1``, and its values past
  ``s_j lambda = 2`` are zeroed the same way).
- Coefficients ``a``, ``b`` and scales come from a one-block transformer over sine-encoded
  eigenvalues: per-eigenvalue decoder outputs are averaged over the graph's eigenvalues, passed
  through a sigmoid, and ``a``, ``b`` normalised to sum 1; ``s = sigmoid * s_max``.
- WaveConv: for each of the J + 1 filters, ``T_t = U diag(f_t(lambda)) U^T`` with rows normalised to
  unit L2 norm; the t-th block of channels is ``T_t act(T_t X W_t)`` (the code applies the filter on
  both sides of the nonlinearity); the blocks are concatenated and mixed by a linear layer (the
  matrix-valued kernel).

Choices made here (the code base has several variants): one eigenvalue encoder shared by all
layers, with per-layer decoders (each layer learns its own wavelets); one attention head; no tight-
frame normalisation; a residual + LayerNorm + feed-forward block around each WaveConv as in the
GraphGPS-style layer the authors use.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from edgesmith.models.papers.wavegc.config import WaveGCConfig
from edgesmith.models.papers.wavegc.data import unpack

NORM_EPS = 1e-12  # inside the square root: a zero (padded) row must not give an infinite gradient
MASK_NEG = -1e4  # additive attention mask: large enough to vanish after softmax, finite so int8 QDQ stays sane


def chebyshev_odd_even(y: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(T_1, T_3, ..., T_{2n-1})(y)`` and ``(T_0, T_2, ..., T_{2n-2})(y)``, stacked on a new last axis."""
    t_even, t_odd = torch.ones_like(y), y
    evens, odds = [t_even], [t_odd]
    for _ in range(n - 1):
        t_even = 2 * y * t_odd - t_even
        t_odd = 2 * y * t_even - t_odd
        evens.append(t_even)
        odds.append(t_odd)
    return torch.stack(odds, -1), torch.stack(evens, -1)


def scaling_function(lam: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``h(lambda)`` for eigenvalues (B, N) and normalised coefficients (B, K): (B, N)."""
    odd, _ = chebyshev_odd_even(lam - 1.0, a.shape[-1])
    return (0.5 * (1.0 - odd) * a[:, None, :]).sum(-1)


def wavelet_functions(lam: torch.Tensor, b: torch.Tensor, scales: torch.Tensor, admissible: bool = True) -> torch.Tensor:
    """``g_j(s_j lambda)`` for eigenvalues (B, N), coefficients (B, K), scales (B, J): (B, N, J)."""
    arg = lam[:, :, None] * scales[:, None, :]
    # clamped so the polynomials stay small where the value is zeroed anyway (no huge gradients there)
    odd, even = chebyshev_odd_even(torch.clamp(arg, max=2.0) - 1.0, b.shape[-1])
    base = even if admissible else odd
    g = (0.5 * (1.0 - base) * b[:, None, None, :]).sum(-1)
    return torch.where(arg > 2.0, torch.zeros_like(g), g)


class SineEncoding(nn.Module):
    """``[lambda, sin(100 lambda w_i), cos(100 lambda w_i)]`` with geometric frequencies, then a linear map."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("freq", torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim)))
        self.proj = nn.Linear(dim + 1, dim)

    def forward(self, lam: torch.Tensor) -> torch.Tensor:
        pe = (lam * 100.0)[..., None] * self.freq
        return self.proj(torch.cat([lam[..., None], torch.sin(pe), torch.cos(pe)], -1))


class EigenEncoder(nn.Module):
    """Sine encoding + one pre-norm transformer block (single head) over the graph's eigenvalues."""

    def __init__(self, dim: int):
        super().__init__()
        self.sine = SineEncoding(dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.ffn = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.scale = 1.0 / math.sqrt(dim)

    def forward(self, lam: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        e = self.sine(lam)
        z = self.norm1(e)
        att = torch.matmul(self.q(z), self.k(z).transpose(1, 2)) * self.scale + (1.0 - mask[:, None, :]) * MASK_NEG
        e = e + self.o(torch.matmul(torch.softmax(att, -1), self.v(z)))
        return e + self.ffn(self.norm2(e))


class WaveletGenerator(nn.Module):
    """Per-graph filter values ``[h, g_1 .. g_J]`` at each eigenvalue, from the eigenvalue encoding."""

    def __init__(self, cfg: WaveGCConfig):
        super().__init__()
        self.cfg = cfg
        self.dec_scaling = nn.Linear(cfg.eig_hidden, cfg.n_cheb)
        self.dec_wavelet = nn.Linear(cfg.eig_hidden, cfg.n_cheb)
        self.dec_scales = nn.Linear(cfg.eig_hidden, cfg.n_scales)

    @staticmethod
    def _masked_mean(z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (z * mask[..., None]).sum(1) / (mask.sum(1, keepdim=True) + 1e-8)

    def coefficients(self, eig: torch.Tensor, mask: torch.Tensor):
        """Normalised scaling and wavelet coefficients (B, K) each, and scales (B, J)."""
        a = torch.sigmoid(self._masked_mean(self.dec_scaling(eig), mask))
        b = torch.sigmoid(self._masked_mean(self.dec_wavelet(eig), mask))
        s = torch.sigmoid(self._masked_mean(self.dec_scales(eig), mask)) * self.cfg.s_max
        return a / (a.sum(-1, keepdim=True) + 1e-8), b / (b.sum(-1, keepdim=True) + 1e-8), s

    def forward(self, eig: torch.Tensor, lam: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a, b, s = self.coefficients(eig, mask)
        h = scaling_function(lam, a)
        g = wavelet_functions(lam, b, s, self.cfg.admissible)
        return torch.cat([h[..., None], g], -1) * mask[..., None]  # (B, N, J + 1)


def filter_matrices(u: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``U diag(f_t) U^T`` for each filter t, rows normalised to unit L2 norm: (B, J+1, N, N).

    The explicit form, for checking and plotting; the layers apply it without forming it (``row_norms``).
    """
    scaled = u[:, None, :, :] * values.transpose(1, 2)[:, :, None, :]
    t = torch.matmul(scaled, u.transpose(1, 2)[:, None, :, :])
    return t / torch.sqrt((t * t).sum(-1, keepdim=True) + NORM_EPS)


def row_norms(u: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Row L2 norms of every ``U diag(f_t) U^T``: (B, N, J+1).

    ``T T^T = U diag(f^2) U^T`` because U is orthogonal, so the squared norm of row i is
    ``sum_k U_ik^2 f_k^2``: O(N^2) per filter instead of forming the N x N matrix (O(N^3)).
    """
    return torch.sqrt(torch.matmul(u * u, values * values) + NORM_EPS)


def apply_filter(u: torch.Tensor, f: torch.Tensor, norm: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Row-normalised ``U diag(f) U^T y``, channel by channel: filter values f (B, N, C) at the
    eigenvalues, the matching row norms (B, N, C) and the signal y (B, N, C)."""
    return torch.matmul(u, f * torch.matmul(u.transpose(1, 2), y)) / norm


class WaveConv(nn.Module):
    """Each filter weights its own block of channels; the blocks are concatenated and mixed.

    Block t of channels is ``T_t act(T_t X W_t)``. All blocks run at once: ``W`` stacks the ``W_t``
    and a constant 0/1 matrix spreads each filter's values over its block's channels, so one layer
    costs four batched matmuls whatever the number of filters.
    """

    def __init__(self, hidden: int, n_filters: int):
        super().__init__()
        size = hidden // n_filters
        sizes = [size] * (n_filters - 1) + [hidden - size * (n_filters - 1)]
        spread = torch.zeros(n_filters, hidden)
        start = 0
        for t, width in enumerate(sizes):
            spread[t, start : start + width] = 1.0
            start += width
        self.register_buffer("spread", spread)
        self.block_sizes = tuple(sizes)
        self.blocks = nn.Linear(hidden, hidden)  # rows of block t are W_t
        self.fusion = nn.Linear(hidden, hidden)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor, u: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        f = torch.matmul(values, self.spread)
        r = torch.matmul(row_norms(u, values), self.spread)
        z = apply_filter(u, f, r, self.act(apply_filter(u, f, r, self.blocks(x))))
        return self.act(self.fusion(z))


class _Block(nn.Module):
    """Residual + LayerNorm around a propagation, then residual + LayerNorm around a feed-forward net."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.ReLU(), nn.Linear(2 * hidden, hidden))

    def finish(self, h: torch.Tensor, prop: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(h + prop)
        return self.norm2(h + self.ffn(h)) * mask[..., None]


class WaveGC(nn.Module):
    """Node regression on the packed input ``(B, N, F + 2 + N)``; returns (B, N) with padded nodes at 0."""

    def __init__(self, cfg: WaveGCConfig):
        super().__init__()
        self.cfg = cfg
        self.encode = nn.Linear(cfg.in_features, cfg.hidden)
        self.eig = EigenEncoder(cfg.eig_hidden)
        self.generators = nn.ModuleList(WaveletGenerator(cfg) for _ in range(cfg.layers))
        self.convs = nn.ModuleList(WaveConv(cfg.hidden, cfg.n_scales + 1) for _ in range(cfg.layers))
        self.blocks = nn.ModuleList(_Block(cfg.hidden) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.hidden, 1)

    def filter_values(self, packed: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, the filter values ``[h, g_1..g_J]`` at each eigenvalue: (B, N, J + 1)."""
        _, mask, lam, _ = unpack(packed, self.cfg.in_features)
        eig = self.eig(lam, mask)
        return [gen(eig, lam, mask) for gen in self.generators]

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        x, mask, lam, u = unpack(packed, self.cfg.in_features)
        h = self.encode(x) * mask[..., None]
        eig = self.eig(lam, mask)
        for gen, conv, block in zip(self.generators, self.convs, self.blocks):
            h = block.finish(h, conv(h, u, gen(eig, lam, mask)), mask)
        return self.head(h)[..., 0] * mask


class GCN(nn.Module):
    """Baseline of the same depth and width: the propagation is one hop, ``act(A_hat H W)``.

    Takes the packed input (only its features and mask are used) and the renormalised adjacency
    ``D~^-1/2 (A + I) D~^-1/2`` (B, N, N); it is trained and scored in the claim, not deployed.
    """

    def __init__(self, cfg: WaveGCConfig):
        super().__init__()
        self.cfg = cfg
        self.encode = nn.Linear(cfg.in_features, cfg.hidden)
        self.props = nn.ModuleList(nn.Linear(cfg.hidden, cfg.hidden) for _ in range(cfg.layers))
        self.blocks = nn.ModuleList(_Block(cfg.hidden) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.hidden, 1)

    def forward(self, packed: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
        x, mask, _, _ = unpack(packed, self.cfg.in_features)
        h = self.encode(x) * mask[..., None]
        for lin, block in zip(self.props, self.blocks):
            h = block.finish(h, torch.relu(torch.matmul(a_hat, lin(h))), mask)
        return self.head(h)[..., 0] * mask
