"""The generative denoiser G(y, sigma) and the fake denoiser D_fake(x_t, t, y, sigma): EDM-preconditioned MLPs.

Both follow the public code's structure at MLP scale: EDM preconditioning (c_skip, c_out, c_in,
c_noise = ln(sigma)/4 with sigma_data 0.5), a learned log-variance u(.) of the noise level for the
uncertainty-weighted losses, and a generator that injects its own noise: it denoises
y_hat = y + z sqrt(sigma_hat^2 - sigma^2) at sigma_hat = (1 + gamma) sigma while conditioned on (y, sigma).

The exported generator takes ONE packed tensor ``[c_in(sigma) y, ln(sigma)/4, z]`` (width 2d + 1):
y pre-scaled by c_in and sigma as c_noise keep every input channel O(1) whatever the noise level
(y itself reaches +-300 at sigma = 80), so one per-tensor int8 scale fits the whole input. The
injected noise z is an input, not drawn inside the graph, so the graph is deterministic and the
same z gives the same sample in torch, onnxruntime and TVM.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from edgesmith.models.papers.ncvsd.config import NetConfig


def precond(sigma: torch.Tensor, sigma_data: float):
    """EDM's c_skip, c_out, c_in, c_noise for noise level ``sigma`` (any shape)."""
    s2 = sigma ** 2 + sigma_data ** 2
    return sigma_data ** 2 / s2, sigma * sigma_data / torch.sqrt(s2), 1 / torch.sqrt(s2), torch.log(sigma) / 4


def mlp(n_in: int, n_out: int, hidden: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(n_in, hidden), nn.SiLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.SiLU()]
    layers.append(nn.Linear(hidden, n_out))
    return nn.Sequential(*layers)


class Fourier(nn.Module):
    """Fixed cos/sin features of a scalar (c_noise), frequencies geometric from 1/4 to 4."""

    def __init__(self, n_freqs: int):
        super().__init__()
        freqs = torch.logspace(-2, 2, n_freqs, base=2.0) if n_freqs > 1 else torch.ones(n_freqs)
        self.register_buffer("freqs", 2 * math.pi * freqs)

    @property
    def n_out(self) -> int:
        return 1 + 2 * len(self.freqs)

    def forward(self, c: torch.Tensor) -> torch.Tensor:  # c: [B, 1]
        if len(self.freqs) == 0:
            return c
        a = c * self.freqs
        return torch.cat([c, torch.cos(a), torch.sin(a)], dim=1)


class LogVar(nn.Module):
    """u(sigma): the learned log-variance that weights a loss per noise level (EDM2, NCVSD code)."""

    def __init__(self, n_freqs: int, hidden: int = 32):
        super().__init__()
        self.emb = Fourier(n_freqs)
        self.net = nn.Sequential(nn.Linear(self.emb.n_out, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, sigma: torch.Tensor) -> torch.Tensor:
        return self.net(self.emb(torch.log(sigma.reshape(-1, 1)) / 4))


class Generator(nn.Module):
    """G(y, sigma; z) -> x: one packed float32 input [B, 2d + 1], output [B, d]."""

    def __init__(self, dim: int, cfg: NetConfig):
        super().__init__()
        self.dim, self.sigma_data, self.gamma = dim, float(cfg.sigma_data), float(cfg.gamma)
        self.emb = Fourier(cfg.n_freqs)
        self.net = mlp(2 * dim + self.emb.n_out, dim, cfg.hidden, cfg.depth)

    def pack(self, y: torch.Tensor, sigma: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The packed input for observations ``y`` [B, d] at ``sigma`` ([B, 1] or scalar) with noise ``z``."""
        sigma = torch.as_tensor(sigma, dtype=y.dtype).reshape(-1, 1).expand(len(y), 1)
        _, _, c_in, c_noise = precond(sigma, self.sigma_data)
        return torch.cat([c_in * y, c_noise, z], dim=1)

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        d = self.dim
        u, c, z = packed[:, :d], packed[:, d:d + 1], packed[:, d + 1:]
        sigma = torch.exp(4 * c)
        y = u * torch.sqrt(sigma ** 2 + self.sigma_data ** 2)
        sigma_hat = sigma * (1 + self.gamma)
        y_hat = y + z * (sigma * math.sqrt((1 + self.gamma) ** 2 - 1))
        c_skip, c_out, c_in, _ = precond(sigma_hat, self.sigma_data)
        # c_noise(sigma_hat) = c + ln(1 + gamma)/4: the Fourier features of c cover both levels
        f = self.net(torch.cat([c_in * y_hat, u, self.emb(c)], dim=1))
        return c_skip * y_hat + c_out * f

    def generate(self, y: torch.Tensor, sigma, z: torch.Tensor) -> torch.Tensor:
        return self(self.pack(y, sigma, z))


class FakeDenoiser(nn.Module):
    """D_fake(x_t, t, y, sigma): denoiser of the generator's own samples, conditioned on (y, sigma)."""

    def __init__(self, dim: int, cfg: NetConfig):
        super().__init__()
        self.sigma_data = float(cfg.sigma_data)
        self.emb = Fourier(cfg.n_freqs)
        self.net = mlp(2 * dim + 2 * self.emb.n_out, dim, cfg.hidden, cfg.depth)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, y: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        t, sigma = t.reshape(-1, 1), sigma.reshape(-1, 1)
        c_skip, c_out, c_in, c_t = precond(t, self.sigma_data)
        _, _, c_in_y, c_s = precond(sigma, self.sigma_data)
        f = self.net(torch.cat([c_in * x_t, c_in_y * y, self.emb(c_t), self.emb(c_s)], dim=1))
        return c_skip * x_t + c_out * f
