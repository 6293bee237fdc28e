"""Compression and export passes: one config dataclass + one registered handler per pass.

Registration: one line per pass module in ``PASS_MODULES``; the modules are imported on the first
registry query (so importing ``compress.base`` alone does not import torch).
"""
from compress.base import (
    Artifact,
    LayerReport,
    PassConfig,
    PassContext,
    PassReport,
    PassResult,
    apply_pass,
    config_from_dict,
    config_from_json,
    pass_kinds,
    register_pass,
    run_passes,
)

PASS_MODULES = (
    "compress.export_onnx",  # export-onnx
    "compress.export_lava",  # export-lava
    "compress.quant_int8",  # int8-qdq
    "compress.quant_int4",  # int4-weight-only
    "compress.prune",  # prune-magnitude
    "compress.export_trees",  # export-tree-onnx, export-tree-c
    "compress.rwkvquant.rwkvquant",  # rwkv-rtn, rwkv-gptq, rwkv-gptvq, rwkvquant
    "compress.lrnn.fixed",  # export-lrnn-fixed
)

__all__ = [
    "Artifact", "LayerReport", "PassConfig", "PassContext", "PassReport", "PassResult", "apply_pass",
    "config_from_dict", "config_from_json", "pass_kinds", "register_pass", "run_passes",
]
