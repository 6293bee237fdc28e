"""Training (base autoencoder, then EQ-VAE or plain fine-tuning) and the equivariance measurements.

Losses are per-pixel MSE plus ``kl_weight`` x the per-element KL to N(0, I) (the paper's L1 + LPIPS
+ GAN recipe is replaced by MSE at this scale). EQ-VAE fine-tuning, as in zelaki/eqvae's
``training_step``: with probability ``p_prior`` pick one transform tau (rescale m / L, then k quarter
turns) and train D(tau z) to match tau x (z sampled from the posterior); otherwise, with probability
``p_prior_s``, reconstruct a downscaled image (low-resolution prior preservation), else the image.
The plain control fine-tunes for the same number of steps with the image-reconstruction loss only.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from edgesmith.models.papers.eqvae.config import AEConfig, TrainConfig
from edgesmith.models.papers.eqvae.model import VAE, Transform, sample_transform, scales


def kl_term(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    return 0.5 * (mean ** 2 + logvar.exp() - 1 - logvar).mean()


def ae_loss(vae: VAE, x: torch.Tensor, gen: torch.Generator, kl_weight: float,
            transform: Transform | None = None) -> torch.Tensor:
    """MSE between D(tau z) and tau x (tau = identity when ``transform`` is None) plus the KL term."""
    mean, logvar = vae.encode(x)
    z = mean + torch.exp(0.5 * logvar) * torch.randn(mean.shape, generator=gen)
    if transform is not None:
        z, x = transform(z), transform(x)
    return F.mse_loss(vae.decode(z), x) + kl_weight * kl_term(mean, logvar)


def eq_step_loss(vae: VAE, x: torch.Tensor, gen: torch.Generator, ae: AEConfig, cfg: TrainConfig) -> torch.Tensor:
    """One EQ-VAE training loss: equivariance branch, low-resolution prior, or plain reconstruction."""
    side = x.shape[-1] // 4
    if float(torch.rand((), generator=gen)) < cfg.p_prior:
        return ae_loss(vae, x, gen, ae.kl_weight, sample_transform(gen, side))
    if float(torch.rand((), generator=gen)) < cfg.p_prior_s:
        x = Transform(sample_transform(gen, side).m, 0, side)(x)
    return ae_loss(vae, x, gen, ae.kl_weight)


def _fit(vae: VAE, images: np.ndarray, steps: int, batch: int, lr: float, betas, loss_fn, seed: int,
         cosine: bool, desc: str, progress: bool) -> list[float]:
    """Adam on ``loss_fn(vae, x, gen)`` over random batches; returns the mean loss of every 50 steps."""
    gen = torch.Generator().manual_seed(seed)
    data = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    opt = torch.optim.Adam(vae.parameters(), lr=lr, betas=betas)
    losses, acc = [], 0.0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc=desc, unit="step", leave=False)
    vae.train()
    for step in range(steps):
        if cosine:
            for grp in opt.param_groups:
                grp["lr"] = lr * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        x = data[torch.randint(len(data), (batch,), generator=gen)]
        loss = loss_fn(vae, x, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc += float(loss.detach())
        if (step + 1) % 50 == 0 or step + 1 == steps:
            losses.append(acc / (50 if (step + 1) % 50 == 0 else (step + 1) % 50))
            acc = 0.0
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    vae.eval()
    return losses


def train_base(images: np.ndarray, ae: AEConfig, cfg: TrainConfig, progress: bool = False) -> tuple[VAE, dict]:
    """A VAE trained from scratch on ``images`` with the plain reconstruction loss."""
    torch.manual_seed(cfg.seed)
    vae = VAE(ae, in_channels=images.shape[1])
    t0 = time.perf_counter()
    losses = _fit(vae, images, cfg.base_steps, cfg.batch, cfg.lr, (0.9, 0.999),
                  lambda v, x, g: ae_loss(v, x, g, ae.kl_weight), cfg.seed, True, "eqvae base", progress)
    return vae, {"losses": losses, "seconds": time.perf_counter() - t0}


def finetune(vae: VAE, images: np.ndarray, ae: AEConfig, cfg: TrainConfig, mode: str,
             progress: bool = False) -> tuple[VAE, dict]:
    """Fine-tune ``vae`` in place: ``mode`` "eq" (EQ-VAE) or "plain" (same steps, reconstruction only)."""
    if mode == "eq":
        def loss(v, x, g):
            return eq_step_loss(v, x, g, ae, cfg)
    else:
        def loss(v, x, g):
            return ae_loss(v, x, g, ae.kl_weight)
    t0 = time.perf_counter()
    # the public code's Adam betas for fine-tuning; the same seed for both modes
    losses = _fit(vae, images, cfg.finetune_steps, cfg.batch, cfg.finetune_lr, (0.5, 0.9), loss, cfg.seed + 1,
                  False, f"eqvae {mode}", progress)
    return vae, {"losses": losses, "seconds": time.perf_counter() - t0}


# --- measurements --------------------------------------------------------------------------------------------------


def psnr(recon: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per-image PSNR in dB for images in [0, 1] (peak 1)."""
    mse = ((np.asarray(recon, np.float64) - np.asarray(x, np.float64)) ** 2).reshape(len(x), -1).mean(1)
    return 10 * np.log10(1.0 / np.maximum(mse, 1e-12))


def transforms_of(kind: str, latent_side: int = 8) -> list[Transform]:
    """The transforms one equivariance figure averages over."""
    ms = scales(latent_side)
    if kind == "rotation":
        return [Transform(latent_side, k, latent_side) for k in (1, 2, 3)]
    if kind == "scale":
        return [Transform(m, 0, latent_side) for m in ms]
    if kind == "scale+rotation":
        return [Transform(m, k, latent_side) for m in ms for k in (1, 2, 3)]
    raise ValueError(f"unknown transform kind {kind!r}")


KINDS = ("rotation", "scale", "scale+rotation")


@torch.no_grad()
def equivariance_errors(decode, z: np.ndarray, x: np.ndarray, kinds=KINDS) -> dict[str, float]:
    """Mean per-pixel squared error ||D(tau z) - tau x||^2 for each kind of tau (averaged over its taus)."""
    zt, xt = torch.from_numpy(np.asarray(z, np.float32)), torch.from_numpy(np.asarray(x, np.float32))
    side = zt.shape[-1]
    out = {}
    for kind in kinds:
        errs = [float(F.mse_loss(decode(tau(zt)), tau(xt))) for tau in transforms_of(kind, side)]
        out[kind] = float(np.mean(errs))
    return out
