"""The teacher: a Gaussian mixture whose denoiser E[x0 | x0 + sigma n = x] has a closed form.

For components N(mu_k, s_k^2 I) with weights pi_k, the noisy marginal is a mixture of
N(mu_k, (s_k^2 + sigma^2) I); the posterior weight of component k given x is its softmax
responsibility and, within a component, E[x0 | x, k] = mu_k + s_k^2 / (s_k^2 + sigma^2) (x - mu_k).
So ``denoise`` is the exact posterior mean that a perfectly trained diffusion model would output,
and ``heun_sample`` is the teacher's own many-step sampler (EDM's Heun ODE solver).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ncvsd.config import GMMConfig


class GaussianMixture:
    """An isotropic Gaussian mixture in ``dim`` dimensions (float64 parameters, float32 I/O)."""

    def __init__(self, means, stds, weights):
        self.means = torch.as_tensor(np.asarray(means, dtype=np.float64))
        self.stds = torch.as_tensor(np.asarray(stds, dtype=np.float64)).reshape(-1)
        w = torch.as_tensor(np.asarray(weights, dtype=np.float64)).reshape(-1)
        if self.means.ndim != 2 or len(self.stds) != len(self.means) or len(w) != len(self.means):
            raise EdgesmithError("a Gaussian mixture needs means [K, d], stds [K] and weights [K].",
                                 "pass arrays whose first dimensions agree.")
        if torch.any(self.stds <= 0) or torch.any(w <= 0):
            raise EdgesmithError("mixture stds and weights must be positive.", "drop empty components.")
        self.weights = w / w.sum()

    @classmethod
    def from_config(cls, cfg: GMMConfig) -> "GaussianMixture":
        k = cfg.n_components
        if cfg.dim == 2:
            ang = 2 * math.pi * np.arange(k) / k
            means = cfg.radius * np.stack([np.cos(ang), np.sin(ang)], axis=1)
        else:
            v = np.random.default_rng(cfg.layout_seed).standard_normal((k, cfg.dim))
            means = cfg.radius * v / np.linalg.norm(v, axis=1, keepdims=True)
        weights = np.where(np.arange(k) % 2 == 1, cfg.weights_ratio, 1.0)
        return cls(means, np.full(k, cfg.std), weights)

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def sample(self, n: int, gen: torch.Generator) -> torch.Tensor:
        """``n`` exact samples (float32), drawn with ``gen``."""
        if n == 0:
            return torch.zeros(0, self.dim)
        k = torch.multinomial(self.weights, n, replacement=True, generator=gen)
        eps = torch.randn(n, self.dim, generator=gen, dtype=torch.float64)
        return (self.means[k] + self.stds[k, None] * eps).float()

    def denoise(self, x: torch.Tensor, sigma) -> torch.Tensor:
        """E[x0 | x0 + sigma n = x] for a batch ``x`` [B, d] and ``sigma`` (scalar or [B] / [B, 1])."""
        xd = x.double()
        s2 = torch.as_tensor(sigma, dtype=torch.float64).reshape(-1, 1) ** 2  # [B or 1, 1]
        var = self.stds[None, :] ** 2 + s2  # [B, K]
        d2 = ((xd[:, None, :] - self.means[None]) ** 2).sum(-1)  # [B, K]
        logits = torch.log(self.weights)[None] - 0.5 * d2 / var - 0.5 * self.dim * torch.log(var)
        r = torch.softmax(logits, dim=1)
        shrink = (self.stds[None, :] ** 2 / var)[..., None]  # [B, K, 1]
        comp = self.means[None] + shrink * (xd[:, None, :] - self.means[None])
        return (r[..., None] * comp).sum(1).to(x.dtype)

    def heun_sample(self, n: int, gen: torch.Generator, steps: int = 18, sigma_min: float = 0.002,
                    sigma_max: float = 80.0, rho: float = 7.0) -> torch.Tensor:
        """EDM's deterministic Heun sampler on the exact denoiser (2 * steps - 1 denoiser calls)."""
        ts = karras_schedule(steps, sigma_min, sigma_max, rho)
        x = torch.randn(n, self.dim, generator=gen, dtype=torch.float64) * ts[0]
        ts = torch.cat([ts, torch.zeros(1, dtype=torch.float64)])
        for i in range(steps):
            t, t_next = ts[i], ts[i + 1]
            d = (x - self.denoise(x, t)) / t
            x_next = x + (t_next - t) * d
            if t_next > 0:
                d2 = (x_next - self.denoise(x_next, t_next)) / t_next
                x_next = x + (t_next - t) * 0.5 * (d + d2)
            x = x_next
        return x.float()


def karras_schedule(steps: int, sigma_min: float = 0.002, sigma_max: float = 80.0, rho: float = 7.0) -> torch.Tensor:
    """``steps`` noise levels from sigma_max down to sigma_min, evenly spaced in sigma^(1/rho)."""
    ramp = torch.linspace(0, 1, steps, dtype=torch.float64)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return (hi + ramp * (lo - hi)) ** rho
