"""The ``eqvae`` producer: a small convolutional VAE on procedural shapes, fine-tuned with EQ-VAE.

Input: a grayscale image [1, 32, 32] in [0, 1]. Output: one row per image packing the
reconstruction (1024 values) and the posterior-mean latent (4 x 8 x 8 = 256 values); see
``models.papers.eqvae.model.DeployedAE``. Metric: reconstruction PSNR (dB, higher is better); the
equivariance errors are in ``Evaluation.extra``.

``finetune``: "eq" (default: EQ-VAE fine-tuning), "plain" (the control: the same number of steps with
the reconstruction loss only) or "none" (the base autoencoder). The base model is cached on its own,
so the three variants of one seed share it. ``tiny=True`` trains for a few seconds (tests only).
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import EdgesmithError, cache_dir, module_cached
from edgesmith.models.papers.eqvae.config import FINETUNE_MODES, AEConfig, ShapesConfig, TrainConfig
from edgesmith.models.papers.eqvae.model import VAE, DeployedAE
from edgesmith.models.papers.eqvae.shapes import load_splits
from edgesmith.models.papers.eqvae.train import KINDS, equivariance_errors, finetune, psnr, train_base


@register_producer
class EqvaeProducer(Producer):
    name = "eqvae"
    tiny_options = {"tiny": True}
    description = "EQ-VAE: conv VAE on 32x32 procedural shapes, fine-tuned for latent scale/rotation equivariance"
    metric = Metric("psnr", higher_is_better=True, unit="dB")

    def __init__(self, seed: int = 0, tiny: bool = False, finetune: str = "eq"):
        super().__init__(seed=seed)
        if finetune not in FINETUNE_MODES:
            raise EdgesmithError(f"finetune is {finetune!r}.", f"use one of: {', '.join(FINETUNE_MODES)}.")
        self.tiny, self.finetune = tiny, finetune
        self.data_cfg = ShapesConfig(n_train=256, n_test=64, seed=seed) if tiny else ShapesConfig(seed=seed)
        self.ae_cfg = AEConfig(channels=8) if tiny else AEConfig()
        self.train_cfg = (TrainConfig(base_steps=40, finetune_steps=20, batch=16, seed=seed) if tiny
                          else TrainConfig(seed=seed))

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (1, self.data_cfg.size, self.data_cfg.size)

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        side = self.data_cfg.size // 4
        return (self.ae_cfg.z_channels, side, side)

    def splits(self) -> dict[str, np.ndarray]:
        if not hasattr(self, "splits_"):
            self.splits_ = load_splits(self.data_cfg)
        return self.splits_

    # --- training and cache -----------------------------------------------------------------------------

    def _key(self, phase: str) -> str:
        t = self.train_cfg.to_dict()
        if phase == "base":
            t = {k: t[k] for k in ("base_steps", "batch", "lr", "seed")}
        key = repr((self.name, phase, self.data_cfg.to_dict(), self.ae_cfg.to_dict(), t, torch.__version__))
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def _cache_path(self, phase: str):
        return cache_dir() / "models" / f"{self.name}-{phase}-{self._key(phase)}.pt"

    def _phase(self, phase: str, make) -> VAE:
        """The VAE of ``phase`` ("base", "eq", "plain") from the cache, or ``make()`` cached."""
        return module_cached(self._cache_path(phase), lambda: VAE(self.ae_cfg), make)[0]

    def build_vae(self, mode: str | None = None, progress: bool = False) -> VAE:
        """The VAE for ``mode`` ("none", "eq", "plain"; default: this producer's), trained or from the cache."""
        mode = mode or self.finetune

        def make_base():
            base, self.base_history_ = train_base(self.splits()["train"], self.ae_cfg, self.train_cfg, progress)
            return base

        def make_finetuned():
            vae, self.finetune_history_ = finetune(self._phase("base", make_base), self.splits()["train"],
                                                   self.ae_cfg, self.train_cfg, mode, progress)
            return vae

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # deterministic and polite on a shared machine
        try:
            return self._phase("base", make_base) if mode == "none" else self._phase(mode, make_finetuned)
        finally:
            torch.set_num_threads(threads)

    def build(self, progress: bool = False) -> "EqvaeProducer":
        self.module_ = DeployedAE(self.build_vae(progress=progress)).eval()
        return self

    # --- data and evaluation -------------------------------------------------------------------------------

    def calibration_data(self, n: int = 128) -> np.ndarray:
        x = self.splits()["train"]
        idx = np.sort(np.random.default_rng(self.seed).permutation(len(x))[: min(n, len(x))])
        return np.ascontiguousarray(x[idx])

    def split_output(self, out: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(reconstructions [n, 1, H, W], latents [n, C, L, L]) from the packed output rows."""
        out = np.asarray(out, dtype=np.float32)
        n_img, n_lat = int(np.prod(self.input_shape)), int(np.prod(self.latent_shape))
        if out.shape != (n, n_img + n_lat):
            raise EdgesmithError(f"the model returned shape {out.shape}; expected ({n}, {n_img + n_lat}) "
                                 "(reconstruction + latent per row).", "evaluate the eqvae module's packed output.")
        return out[:, :n_img].reshape(n, *self.input_shape), out[:, n_img:].reshape(n, *self.latent_shape)

    def evaluate(self, predict, split: str = "test") -> Evaluation:
        x = self.splits()[split]
        recon, z = self.split_output(predict(x), len(x))
        per_image = psnr(recon, x)
        decoder = self.module.vae.decode
        extra = {
            "mse": float(np.mean((recon - x) ** 2)),
            "equivariance_mse": equivariance_errors(decoder, z, x, KINDS),
            "latent_rotation_error": self._latent_rotation_error(predict, x, z),
        }
        return Evaluation(self.metric, float(per_image.mean()), len(x), extra=extra)

    @staticmethod
    def _latent_rotation_error(predict, x: np.ndarray, z: np.ndarray) -> float:
        """||E(rot x) - rot E(x)||^2 / ||E(x)||^2 averaged over k = 1, 2, 3, all through ``predict``."""
        errs = []
        for k in (1, 2, 3):
            xr = np.ascontiguousarray(np.rot90(x, k, axes=(-1, -2)))
            zr = np.asarray(predict(xr), dtype=np.float32)[:, -z[0].size:].reshape(z.shape)
            errs.append(np.sum((zr - np.rot90(z, k, axes=(-1, -2))) ** 2) / max(np.sum(z ** 2), 1e-12))
        return float(np.mean(errs))

    def unsupported_formats(self) -> dict[str, str]:
        return {"int4": "convolution-only model: no MatMul weights for 4-bit weight-only quantization (MatMulNBits)"}

    def report_notes(self) -> list[str]:
        return [
            "The exported graph maps an image to one row packing its reconstruction and its posterior-mean latent; "
            "the EQ-VAE transforms (bilinear rescale, rot90) are applied outside the graph.",
            "extra.equivariance_mse decodes transformed latents of the evaluated model with the fp32 torch decoder "
            "(a rescaled latent has a different size than the exported graph takes), so for compressed variants "
            "it reflects the compressed encoder only; extra.latent_rotation_error runs entirely through the "
            "evaluated model.",
        ]
