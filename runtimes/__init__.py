"""Runtimes: one file per backend, same class shape.

Registration: one line per backend in ``RUNTIME_MODULES`` (runtime name -> module). A backend's module
is imported when that runtime is first asked for, so timing an onnxruntime model never imports torch.
"""
from edgesmith.runtimes.base import RunResult, Runtime, get_runtime, register_runtime, runtime_names

RUNTIME_MODULES = {
    "torch": "edgesmith.runtimes.torch_rt",
    "onnxruntime": "edgesmith.runtimes.onnxruntime_rt",
    "tvm": "edgesmith.runtimes.tvm_rt",
    "lava": "edgesmith.runtimes.lava_rt",
    "netx-ref": "edgesmith.runtimes.netx_ref_rt",
    "nir-float": "edgesmith.runtimes.nir_float_rt",
    "c": "edgesmith.runtimes.c_rt",
    "trees": "edgesmith.runtimes.trees_rt",
    "lrnn-ref": "edgesmith.runtimes.lrnn_ref",
    "lava-lrnn": "edgesmith.runtimes.lava_lrnn_rt",
    "rwkv-c": "edgesmith.runtimes.rwkv_c_rt",
    "openvino": "edgesmith.runtimes.openvino_rt",
}



def runtime_for(artifact) -> str:
    """The runtime that runs ``artifact`` on this machine without a simulator (its format's reference runtime)."""
    from edgesmith.compress.formats import reference_runtime

    return reference_runtime(artifact.format)


__all__ = ["runtime_for", "RunResult", "Runtime", "get_runtime", "register_runtime", "runtime_names"]
