"""Training and scoring of the S5 denoiser on STFT frames (loss of the paper: 0.001 MSE + 100 - SI-SNR).

``train`` takes an ``after_step(step, total_steps)`` hook, called after every optimizer step: the
compression passes (``compress.lrnn``) use it to grow and re-apply pruning masks, which keeps
``models`` free of imports from downstream packages.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from edgesmith.common import seed_everything
from edgesmith.models.lrnn.config import Config
from edgesmith.models.lrnn.data import Split, apply_mask, features, istft, si_snr, stft, stoi

MaskFn = Callable[[np.ndarray], np.ndarray]  # features (n, T, 257) -> mask (n, T, 257)


@dataclass(frozen=True)
class TrainConfig(Config):
    epochs: int = 30
    lr: float = 3e-3
    batch: int = 16
    seed: int = 0
    threads: int = 2
    max_seconds: float | None = None  # stop early (after a whole epoch) once this budget is spent

    def validate(self) -> None:
        if self.epochs < 0:
            self._fail("epochs", f"is {self.epochs}", "use zero or more epochs.")
        if self.batch < 1:
            self._fail("batch", f"is {self.batch}", "use a batch of at least one clip.")
        if not self.lr > 0:
            self._fail("lr", f"is {self.lr}", "use a positive learning rate.")


@dataclass
class Prepared:
    """STFT of one split: complex spectra, model features, waveforms."""

    spec: torch.Tensor
    feat: torch.Tensor
    clean: torch.Tensor
    clean_mag: torch.Tensor
    noisy: np.ndarray


def prepare(split: Split) -> Prepared:
    spec = stft(split.noisy)
    clean = torch.from_numpy(split.clean).double()
    return Prepared(spec, features(spec.abs()), clean, stft(clean).abs(), split.noisy)


def _loss(model, data: Prepared) -> torch.Tensor:
    mask = model(data.feat)
    est_spec = apply_mask(data.spec, mask)
    est = istft(est_spec, data.clean.shape[1])
    mse = torch.mean((est_spec.abs() - data.clean_mag) ** 2)
    return 0.001 * mse + 100.0 - si_snr(est, data.clean).mean()


def train(model: torch.nn.Module, train_split: Split, cfg: TrainConfig,
          after_step: Callable[[int, int], None] | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Adam over shuffled clips for ``cfg.epochs`` epochs; returns a small history."""
    seed_everything(cfg.seed)
    n = len(train_split)
    steps_per_epoch = max(1, int(np.ceil(n / cfg.batch)))
    total = steps_per_epoch * cfg.epochs
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(total, 1))
    gen = torch.Generator().manual_seed(cfg.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    hist, step, t0 = {"loss": [], "epochs_run": 0}, 0, time.perf_counter()
    try:
        model.train()
        for epoch in range(cfg.epochs):
            perm = torch.randperm(n, generator=gen)
            losses = []
            for i in range(0, n, cfg.batch):
                opt.zero_grad()
                loss = _loss(model, prepare(train_split.subset(perm[i : i + cfg.batch].numpy())))  # STFT per batch: bounded memory
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                step += 1
                if after_step is not None:
                    after_step(step, total)
                losses.append(float(loss.detach()))
            hist["loss"].append(float(np.mean(losses)))
            hist["epochs_run"] = epoch + 1
            if log:
                log(f"epoch {epoch + 1}/{cfg.epochs} loss {hist['loss'][-1]:.3f}")
            if cfg.max_seconds is not None and time.perf_counter() - t0 > cfg.max_seconds:
                break
    finally:
        model.eval()
        torch.set_num_threads(threads)
    hist["seconds"] = time.perf_counter() - t0
    return hist


def torch_mask_fn(model: torch.nn.Module) -> MaskFn:
    def fn(feat: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.eval()(torch.as_tensor(feat, dtype=torch.float32)).numpy()
    return fn


def enhance(mask_fn: MaskFn, split: Split) -> np.ndarray:
    """Enhanced waveforms (n, samples) of a split with a mask function."""
    data = prepare(split)
    mask = torch.as_tensor(np.asarray(mask_fn(data.feat.numpy())))
    return istft(apply_mask(data.spec, mask), split.noisy.shape[1]).numpy()


def score(mask_fn: MaskFn, split: Split, with_stoi: bool = False) -> dict:
    """SI-SNR of the enhanced and the noisy clips, the improvement, optionally STOI (means over clips)."""
    est = enhance(mask_fn, split)
    out = {"si_snr_db": float(np.mean(si_snr(est, split.clean))),
           "si_snr_noisy_db": float(np.mean(si_snr(split.noisy, split.clean))), "n_clips": len(split)}
    out["si_snr_improvement_db"] = out["si_snr_db"] - out["si_snr_noisy_db"]
    if with_stoi:
        out["stoi"] = float(np.nanmean(stoi(est, split.clean)))
        out["stoi_noisy"] = float(np.nanmean(stoi(split.noisy, split.clean)))
        out["stoi_gain"] = out["stoi"] - out["stoi_noisy"]
    return out
