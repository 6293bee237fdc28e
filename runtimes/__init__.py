"""Runtimes: one file per backend, same class shape.

Registration: one line per backend in ``RUNTIME_MODULES`` (runtime name -> module). A backend's module
is imported when that runtime is first asked for, so timing an onnxruntime model never imports torch.
"""
from runtimes.base import RunResult, Runtime, get_runtime, register_runtime, runtime_names

RUNTIME_MODULES = {
    "torch": "runtimes.torch_rt",
    "onnxruntime": "runtimes.onnxruntime_rt",
    "tvm": "runtimes.tvm_rt",
    "lava": "runtimes.lava_rt",
    "sigma-delta-ref": "runtimes.sigma_delta_rt",
    "c": "runtimes.c_rt",
    "trees": "runtimes.trees_rt",
    "lrnn-ref": "runtimes.lrnn_ref",
    "lava-lrnn": "runtimes.lava_lrnn_rt",
}

__all__ = ["RunResult", "Runtime", "get_runtime", "register_runtime", "runtime_names"]
