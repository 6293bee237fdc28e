"""Training (masked MSE, Adam, one thread) and scoring (MAE over real nodes) of WaveGC and the GCN."""
from __future__ import annotations

import contextlib
from typing import Callable

import numpy as np
import torch
from torch import nn

from edgesmith.common import seed_everything
from edgesmith.models.papers.wavegc.config import TrainConfig
from edgesmith.models.papers.wavegc.data import GraphSet
from edgesmith.models.papers.wavegc.wavegc import GCN


@contextlib.contextmanager
def one_thread():
    """Train on one thread: results do not depend on the core count and the shared machine stays usable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def model_inputs(model: nn.Module, data: GraphSet, idx) -> tuple[torch.Tensor, ...]:
    """The GCN baseline also takes its propagation matrix; WaveGC takes the packed input alone."""
    packed = torch.from_numpy(data.packed[idx])
    return (packed, torch.from_numpy(data.a_hat[idx])) if isinstance(model, GCN) else (packed,)


def masked_mse(pred: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (((pred - y) ** 2) * mask).sum() / mask.sum()


def train(model: nn.Module, data: GraphSet, cfg: TrainConfig, progress: Callable[[int, float], None] | None = None):
    """Adam with cosine decay; returns the per-epoch training losses. Deterministic for ``cfg.seed``."""
    seed_everything(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    steps = max(1, cfg.epochs * int(np.ceil(len(data) / cfg.batch)))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    y, mask = torch.from_numpy(data.y), torch.from_numpy(data.mask)
    losses = []
    model.train()
    with one_thread():
        for epoch in range(cfg.epochs):
            perm = torch.randperm(len(data), generator=gen).numpy()
            total = 0.0
            for i in range(0, len(data), cfg.batch):
                idx = np.sort(perm[i : i + cfg.batch])
                opt.zero_grad()
                loss = masked_mse(model(*model_inputs(model, data, idx)), y[idx], mask[idx])
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(idx)
            losses.append(total / len(data))
            if progress is not None:
                progress(epoch, losses[-1])
    model.eval()
    return losses


def score(pred: np.ndarray, data: GraphSet, far_hops: int | None = None) -> dict:
    """MAE and R^2 over real nodes; with ``far_hops``, also the MAE over nodes more than that many hops
    from every source (beyond the receptive field of a ``far_hops``-layer message-passing GNN)."""
    pred = np.asarray(pred, dtype=np.float64)
    m = data.mask.astype(bool)
    err = pred[m] - data.y[m]
    resid = float(np.sum(err**2))
    total = float(np.sum((data.y[m] - data.y[m].mean()) ** 2))
    out = {"mae": float(np.mean(np.abs(err))), "r2": 1.0 - resid / total, "n_nodes": int(m.sum()),
           "n_graphs": int(len(data))}
    if far_hops is not None:
        far = m & (data.hops > far_hops)
        out["mae_far"] = float(np.mean(np.abs(pred[far] - data.y[far]))) if far.any() else None
        out["n_far_nodes"] = int(far.sum())
    return out


@torch.no_grad()
def predict_torch(model: nn.Module, data: GraphSet, batch: int = 64) -> np.ndarray:
    model.eval()
    outs = []
    with one_thread():
        for i in range(0, len(data), batch):
            idx = np.arange(i, min(i + batch, len(data)))
            outs.append(model(*model_inputs(model, data, idx)).numpy())
    return np.concatenate(outs)
