"""Scale-out plumbing on torch.distributed: a torchrun launcher, byte-counted collectives,
communication compressors with error feedback, and a DDP communication hook built from them.

Backends are gloo on CPU machines and NCCL where every process has its own GPU; processes are
always started by ``torchrun`` (never a home-made message layer).
"""
from edgesmith.models.papers.distributed.compressors import (Compressor, ErrorFeedback, Identity, Quantize, TopK,
                                            make_compressor)
from edgesmith.models.papers.distributed.comm import Comm, CompressedMean
from edgesmith.models.papers.distributed.ddp_hook import CompressionHookState, compression_hook
from edgesmith.models.papers.distributed.launch import LaunchResult, choose_backend, launch, torchrun_path

__all__ = ["Comm", "CompressedMean", "Compressor", "CompressionHookState", "ErrorFeedback", "Identity",
           "LaunchResult", "Quantize", "TopK", "choose_backend", "compression_hook", "launch",
           "make_compressor", "torchrun_path"]
