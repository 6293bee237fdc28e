"""Check the compression hook against plain DDP on this machine's backend (a torchrun worker).

    .venv/bin/torchrun --nproc-per-node 2 --standalone -m edgesmith.models.papers.distributed.selftest \
        --config '{"topk": 0.25}' --result /tmp/check.json

Each rank holds different data. Three checks, reported by rank 0 as maximum absolute differences:
identity hook vs plain DDP (gradients after one backward), top-k + EF14 error buffer vs the local
gradient minus what top-k kept of it, and the hooked gradient vs the mean of every rank's top-k.

For the launcher's own tests, ``lose_rank1`` makes rank 1 vanish without an exception (``os._exit``, as
a worker killed by a signal or a dropped connection would): ``"always"``, or ``"once:PATH"`` (only
while PATH does not exist yet; the lost worker creates it).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from edgesmith.models.papers.distributed.comm import Comm, run_worker
from edgesmith.models.papers.distributed.compressors import Identity, TopK
from edgesmith.models.papers.distributed.ddp_hook import CompressionHookState, compression_hook


def _grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    model.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()


def _maybe_lose_rank1(spec: str | None, rank: int) -> None:
    if not spec or rank != 1:
        return
    if spec == "always":
        os._exit(3)
    marker = Path(spec.removeprefix("once:"))
    if not marker.exists():
        marker.touch()
        os._exit(3)


def check(config: dict, comm: Comm) -> dict:
    _maybe_lose_rank1(config.get("lose_rank1"), comm.rank)
    torch.manual_seed(0)  # identical initial weights on every rank
    base = nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 3))
    g = torch.Generator().manual_seed(100 + comm.rank)  # different data on every rank
    x, y = torch.randn(16, 8, generator=g), torch.randn(16, 3, generator=g)
    big = 1000.0  # one bucket for all parameters, so the buffer layout is simply the parameters concatenated

    plain = DDP(copy.deepcopy(base), bucket_cap_mb=big)
    _backward(plain, x, y)
    ident = DDP(copy.deepcopy(base), bucket_cap_mb=big)
    ident.register_comm_hook(CompressionHookState(Identity(), ef_mode="none", comm=comm), compression_hook)
    _backward(ident, x, y)

    local = copy.deepcopy(base)
    _backward(local, x, y)
    g_local = _grads(local)
    topk = TopK(float(config.get("topk", 0.25)))
    state = CompressionHookState(topk, ef_mode="ef14", comm=comm)
    hooked = DDP(copy.deepcopy(base), bucket_cap_mb=big)
    hooked.register_comm_hook(state, compression_hook)
    _backward(hooked, x, y)
    (error,) = state.feedback.error.values()
    sent = topk.apply(g_local)  # one bucket: its buffer is the parameters' gradients in registration order
    mean_sent = torch.stack(comm.all_gather(sent)).mean(0)
    return {
        "identity_vs_plain_max_abs": float((_grads(ident) - _grads(plain)).abs().max()),
        "error_vs_unsent_max_abs": float((error - (g_local - sent)).abs().max()),
        "error_nonzero": int((error != 0).sum()),
        "unsent_entries": int(g_local.numel() - topk.k(g_local.numel())),
        "hooked_vs_mean_topk_max_abs": float((_grads(hooked) - mean_sent).abs().max()),
        "grad_norm": float(g_local.norm()),
    }


if __name__ == "__main__":
    run_worker(check)
