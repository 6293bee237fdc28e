"""Inside a torchrun worker: process-group setup, byte-counted collectives, compressed averaging.

Every collective goes through ``Comm`` so the bytes a process puts on the wire are counted: for each
collective, the number of elements this process contributes times their element size (an
all-reduce of n float32 counts 4n bytes; an all-gather counts this rank's own tensor). That is the
payload each worker sends, independent of how the backend routes it (ring, tree); the launcher
reports it per worker and summed over workers.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from edgesmith.common import write_json
from edgesmith.models.papers.distributed.compressors import Compressor, ErrorFeedback, Identity

BACKEND_ENV = "EDGESMITH_DIST_BACKEND"
TIMEOUT_ENV = "EDGESMITH_DIST_TIMEOUT_S"


class Comm:
    """The process group of this worker plus counters of what it sent."""

    def __init__(self):
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.backend = dist.get_backend()
        self.bytes_sent = 0
        self.elements_sent = 0
        self.collectives = 0

    def _count(self, t: torch.Tensor) -> None:
        self.bytes_sent += t.numel() * t.element_size()
        self.elements_sent += t.numel()
        self.collectives += 1

    def _dev(self, t: torch.Tensor) -> torch.Tensor:
        return t.cuda() if self.backend == "nccl" else t

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        self._count(t)
        buf = self._dev(t.clone())
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        return buf.cpu()

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        self._count(t)
        src = self._dev(t.contiguous())
        outs = [torch.empty_like(src) for _ in range(self.world)]
        dist.all_gather(outs, src)
        return [o.cpu() for o in outs]

    def stats(self) -> dict:
        """This rank's counters and, through one uncounted all-reduce, the totals over all ranks."""
        mine = torch.tensor([self.bytes_sent, self.elements_sent, self.collectives], dtype=torch.float64)
        total = self._dev(mine.clone())
        dist.all_reduce(total)
        total = total.cpu()
        return {"processes": self.world, "backend": self.backend, "bytes_sent_per_worker": self.bytes_sent,
                "elements_sent_per_worker": self.elements_sent, "collectives": self.collectives,
                "bytes_sent_total": int(total[0]), "elements_sent_total": int(total[1])}


class CompressedMean:
    """mean over workers of a tensor, sent compressed with error feedback.

    Uncompressed (``Identity`` without memory) it is one all-reduce. Otherwise every payload tensor is
    all-gathered (sparse and packed payloads cannot be summed on the wire), each worker decompresses
    all payloads and averages them: identical results on every rank, and the counted bytes are the
    compressed payload. Stochastic compressors draw from a per-rank generator seeded from ``seed``.
    """

    def __init__(self, comm: Comm, compressor: Compressor, ef_mode: str = "ef14", seed: int = 0):
        self.comm = comm
        self.feedback = ErrorFeedback(compressor, ef_mode)
        self.generator = torch.Generator().manual_seed(int(seed) * 1000003 + comm.rank)

    @property
    def compressor(self) -> Compressor:
        return self.feedback.compressor

    def __call__(self, key, x: torch.Tensor) -> torch.Tensor:
        shape, n = x.shape, x.numel()
        if isinstance(self.compressor, Identity) and self.feedback.mode != "ef21":
            mean = self.comm.all_reduce_sum(x.reshape(-1).to(torch.float32)) / self.comm.world
            return mean.reshape(shape)
        _, payload = self.feedback.message(key, x, self.generator)
        gathered = [self.comm.all_gather(p) for p in payload]  # gathered[j][rank]
        total = torch.zeros(n, dtype=torch.float32)
        for r in range(self.comm.world):
            total += self.compressor.decompress([g[r] for g in gathered], n)
        return self.feedback.combine(key, total / self.comm.world).reshape(shape)


def run_worker(fn: Callable[[dict, Comm], dict], argv=None) -> None:
    """Entry point of a torchrun worker: ``--config JSON --result FILE``; rank 0 writes the result.

    ``fn(config, comm)`` runs on every rank; rank 0's return value, plus the communication counters,
    is written atomically to ``--result`` for the launcher.
    """
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="JSON object of the run's settings")
    ap.add_argument("--result", required=True, help="where rank 0 writes its JSON result")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # several processes share few cores; one thread each is fastest and deterministic
    backend = os.environ.get(BACKEND_ENV, "gloo")
    timeout = _dt.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "300")))
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend, timeout=timeout)
    try:
        comm = Comm()
        out = fn(json.loads(args.config), comm)
        stats = comm.stats()
        if comm.rank == 0:
            write_json(Path(args.result), {"result": out, "communication": stats})
        dist.barrier()
    finally:
        dist.destroy_process_group()
