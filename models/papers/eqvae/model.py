"""A small convolutional VAE, the EQ-VAE latent transforms, and the module that deployment exports.

Encoder: 32 -> 16 -> 8 with two stride-2 convolutions, then a 1x1 convolution to the mean and log
variance of ``z_channels`` latent maps (8 x 8). Decoder: convolutions with nearest-neighbour
upsampling back to 32 x 32. Both are fully convolutional, so the decoder accepts the smaller
latents that EQ-VAE's rescaling produces.

Transforms (the public code's): a bilinear rescale (align_corners=False, no antialiasing) by
s = m / L of the latent side L (L = 8 here; the paper's set {8/32 .. 31/32} is m / 32 for its
32-wide latent, so the same rule with L = 8 gives m = 2..7, i.e. {8/32, 12/32, ..., 28/32}: the
scales at which latent and image sizes stay consistent), then ``torch.rot90`` by k quarter turns
over dims (-1, -2). ``Transform`` applies one (s, k) to latents and images alike.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.eqvae.config import AEConfig


@dataclass(frozen=True)
class Transform:
    """Rescale to ``m / L`` of the latent side, then rotate by ``k`` quarter turns (m = L: no rescale)."""

    m: int
    k: int
    latent_side: int = 8

    def __post_init__(self):
        if not 1 <= self.m <= self.latent_side or self.k not in (0, 1, 2, 3):
            raise EdgesmithError(f"transform (m={self.m}, k={self.k}) is outside 1 <= m <= {self.latent_side}, "
                                 "k in 0..3.", "pick m from scales() and k from 0, 1, 2, 3.")

    @property
    def scale(self) -> float:
        return self.m / self.latent_side

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        """Apply to a latent [B, C, L, L] or an image [B, C, f L, f L]: the same s and k for both."""
        if self.m != self.latent_side:
            side = t.shape[-1] * self.m // self.latent_side
            t = F.interpolate(t, size=(side, side), mode="bilinear", align_corners=False)
        return torch.rot90(t, self.k, dims=(-1, -2)) if self.k else t


def scales(latent_side: int = 8) -> list[int]:
    """The rescale numerators m (scale m / L): ceil(L / 4) .. L - 1, the paper's 8/32 .. 31/32 rule."""
    return list(range(-(-latent_side // 4), latent_side))


def sample_transform(gen: torch.Generator, latent_side: int = 8) -> Transform:
    ms = scales(latent_side)
    m = ms[int(torch.randint(len(ms), (1,), generator=gen))]
    return Transform(m, int(torch.randint(1, 4, (1,), generator=gen)), latent_side)


class VAE(nn.Module):
    def __init__(self, cfg: AEConfig, in_channels: int = 1):
        super().__init__()
        c, zc = cfg.channels, cfg.z_channels
        self.z_channels = zc
        self.encoder = nn.Sequential(
            nn.Conv2d(in_channels, c, 3, 2, 1), nn.SiLU(),
            nn.Conv2d(c, 2 * c, 3, 2, 1), nn.SiLU(),
            nn.Conv2d(2 * c, 2 * c, 3, 1, 1), nn.SiLU(),
            nn.Conv2d(2 * c, 2 * zc, 1),
        )
        self.decoder = nn.Sequential(
            nn.Conv2d(zc, 2 * c, 3, 1, 1), nn.SiLU(),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(2 * c, 2 * c, 3, 1, 1), nn.SiLU(),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(2 * c, c, 3, 1, 1), nn.SiLU(),
            nn.Conv2d(c, in_channels, 3, 1, 1),
        )

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and log variance (clamped as in the LDM code's DiagonalGaussianDistribution)."""
        h = self.encoder(x)
        return h[:, : self.z_channels], h[:, self.z_channels:].clamp(-30.0, 20.0)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x)[0])


class DeployedAE(nn.Module):
    """Image [B, 1, H, W] in, one tensor out: [reconstruction (H W values), posterior mean latent] per row.

    Packing the latent with the reconstruction lets one exported graph feed both figures: the
    reconstruction PSNR and (with the reference decoder, outside the graph) the equivariance error
    of decoding transformed latents.
    """

    def __init__(self, vae: VAE):
        super().__init__()
        self.vae = vae

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.vae.encode(x)[0]
        return torch.cat([self.vae.decode(z).flatten(1), z.flatten(1)], dim=1)
