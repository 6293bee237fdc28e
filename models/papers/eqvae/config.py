"""EQ-VAE configuration: the shapes data, the autoencoder and the two training phases.

Each config validates on construction and round-trips through JSON (``to_dict`` / ``from_dict``),
so the cache key, the claim table and a deploy report name the same settings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from edgesmith.common import Config
from edgesmith.common.checks import is_int

FINETUNE_MODES = ("eq", "plain", "none")


class _Config(Config):
    """The shared config mixin plus this package's own field check."""

    def _number(self, name: str, *, integer: bool = False, low: float = 0.0, inclusive: bool = False) -> None:
        v = getattr(self, name)
        kinds = (int,) if integer else (int, float)
        ok = not isinstance(v, bool) and isinstance(v, kinds) and math.isfinite(v) and (v >= low if inclusive else v > low)
        if not ok:
            self._fail(name, f"is {v!r}", f"use a {'whole number' if integer else 'number'} "
                                          f"{'of at least' if inclusive else 'above'} {low}.")


@dataclass(frozen=True)
class ShapesConfig(_Config):
    """Grayscale ``size`` x ``size`` images of 1..``max_shapes`` circles, squares and triangles.

    Each shape has a random centre, size, rotation and grey level and is rendered with anti-aliased
    edges, so bilinear rescaling of an image stays meaningful.
    """

    n_train: int = 4096
    n_test: int = 512
    size: int = 32
    max_shapes: int = 2
    seed: int = 0

    def validate(self) -> None:
        for name in ("n_train", "n_test", "max_shapes"):
            self._number(name, integer=True)
        if not is_int(self.size, 16) or self.size % 4:
            self._fail("size", f"is {self.size!r}", "use a multiple of 4 of at least 16 (the encoder downsamples by 4).")


@dataclass(frozen=True)
class AEConfig(_Config):
    """Convolutional VAE: two stride-2 stages (32 -> 8), ``z_channels`` latent channels.

    ``kl_weight``: weight of the per-element KL term against the per-pixel MSE. The public config
    uses 1e-6 on SD-VAE: a small-KL VAE that is in practice an autoencoder with a smooth latent.
    Evaluation and deployment use the posterior mean.
    """

    channels: int = 16
    z_channels: int = 4
    kl_weight: float = 1e-6

    def validate(self) -> None:
        self._number("channels", integer=True)
        self._number("z_channels", integer=True)
        self._number("kl_weight", inclusive=True)


@dataclass(frozen=True)
class TrainConfig(_Config):
    """Base training, then fine-tuning for ``finetune_steps`` steps (EQ-VAE or the plain control).

    ``p_prior`` = 0.5: chance of the equivariance branch per step (public code); otherwise with
    ``p_prior_s`` = 0.25 a downscaled image is reconstructed (the code's low-resolution prior
    preservation), else the full-size image.
    """

    base_steps: int = 600
    finetune_steps: int = 300
    batch: int = 32
    lr: float = 2e-3
    finetune_lr: float = 5e-4
    p_prior: float = 0.5
    p_prior_s: float = 0.25
    seed: int = 0

    def validate(self) -> None:
        self._number("base_steps", integer=True)
        self._number("finetune_steps", integer=True, inclusive=True)
        self._number("batch", integer=True)
        self._number("lr")
        self._number("finetune_lr")
        for name in ("p_prior", "p_prior_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                self._fail(name, f"is {v!r}", "use a probability between 0 and 1.")
