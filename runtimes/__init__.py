"""Runtimes: one file per backend, same class shape. Registration: one import line per backend."""
from runtimes.base import RunResult, Runtime, get_runtime, register_runtime, runtime_names

from runtimes import torch_rt  # noqa: F401  (torch)
from runtimes import onnxruntime_rt  # noqa: F401  (onnxruntime)
from runtimes import lava_rt  # noqa: F401  (lava)

__all__ = ["RunResult", "Runtime", "get_runtime", "register_runtime", "runtime_names"]
