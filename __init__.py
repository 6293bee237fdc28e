"""edgesmith: compress a model for a piece of hardware, export it, run it and measure it honestly.

The repository's five folders are this package's subpackages (``edgesmith.models``,
``edgesmith.compress``, ``edgesmith.hardware``, ``edgesmith.runtimes``, ``edgesmith.bench``). The
Python API mirrors the command line::

    import edgesmith
    report_dir = edgesmith.deploy("digits-mlp", target="host-cpu", out="runs/digits-host")
    edgesmith.deploy("rwkv7-ref", target="host-cpu", options={"bits": [4]}, out="runs/rwkv")
    edgesmith.quantize("model.onnx", "int8-qdq", calibration=calib_array, out="m.int8.onnx")
    edgesmith.sweep("bench/recipes/sweeps/scaling.toml", workers=2)   # or ray="auto"
    edgesmith.targets(), edgesmith.producers(), edgesmith.passes(), edgesmith.kinds()

(see ``edgesmith.bench.api`` for every argument).

Attributes load on first use, so ``import edgesmith`` stays cheap (no torch) for the processes that
only time an onnxruntime model.
"""
from __future__ import annotations

__version__ = "0.2.0"

# no API name may equal a subpackage name: `from edgesmith import models` must give the package
_API = ("deploy", "quantize", "export", "denoise", "sweep", "targets", "producers", "passes", "kinds")

__all__ = [*_API, "EdgesmithError", "__version__"]


def __getattr__(name: str):
    if name == "EdgesmithError":
        from edgesmith.common import EdgesmithError

        return EdgesmithError
    if name in _API:
        from edgesmith.bench import api

        return getattr(api, name)
    raise AttributeError(f"module 'edgesmith' has no attribute {name!r}")
