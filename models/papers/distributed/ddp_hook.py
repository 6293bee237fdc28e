"""A DDP communication hook that sends each gradient bucket compressed, with error feedback.

    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(model)
    state = CompressionHookState(TopK(0.1), ef_mode="ef14")
    ddp.register_comm_hook(state, compression_hook)

Same contract as ``torch.distributed.algorithms.ddp_comm_hooks``: ``hook(state, bucket)`` returns a
``Future`` holding the bucket's averaged gradient. What is compressed is the **gradient** (the bucket
DDP hands the hook); the default memory is EF14 (the worker keeps what top-k dropped and adds it to
the next gradient of that bucket), EF21 is available with ``ef_mode="ef21"``. Bucket memory is keyed
by bucket index; DDP rebuilds its buckets once after the first step, and a bucket whose size changes
starts from empty memory. The collectives run synchronously and are byte-counted on ``state.comm``.
"""
# no ``from __future__ import annotations``: DDP checks the hook's annotations are the real GradBucket/Future types
import torch
import torch.distributed as dist

from edgesmith.models.papers.distributed.comm import Comm, CompressedMean
from edgesmith.models.papers.distributed.compressors import Compressor


class CompressionHookState:
    """What the hook needs: the compressor, the error-feedback mode, a byte-counting ``Comm``."""

    def __init__(self, compressor: Compressor, ef_mode: str = "ef14", seed: int = 0, comm: Comm | None = None):
        self.comm = comm or Comm()
        self.mean = CompressedMean(self.comm, compressor, ef_mode=ef_mode, seed=seed)

    @property
    def feedback(self):
        return self.mean.feedback


def compression_hook(state: CompressionHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    grad = bucket.buffer()
    avg = state.mean(bucket.index(), grad.detach().cpu()).to(grad.dtype).reshape(grad.shape)
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(avg.to(grad.device))
    return fut
