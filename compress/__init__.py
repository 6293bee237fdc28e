"""Compression and export passes: one config dataclass + one registered handler per pass.

Registration: one line per pass module in ``PASS_MODULES``; the modules are imported on the first
registry query (so importing ``compress.base`` alone does not import torch).
"""
from edgesmith.compress.base import (
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
    "edgesmith.compress.export_onnx",  # export-onnx
    "edgesmith.compress.export_netx",  # export-netx
    "edgesmith.compress.quant_int8",  # int8-qdq
    "edgesmith.compress.quant_int4",  # int4-weight-only
    "edgesmith.compress.quant_fp16",  # fp16
    "edgesmith.compress.prune",  # prune-magnitude
    "edgesmith.compress.export_trees",  # export-tree-onnx, export-tree-c
    "edgesmith.compress.rwkvquant.rwkvquant",  # rwkv-rtn, rwkv-gptq, rwkv-gptvq, rwkvquant
    "edgesmith.compress.lrnn.fixed",  # export-lrnn-fixed
    "edgesmith.compress.lrnn.train_passes",  # prune-lrnn, qat-lrnn
    "edgesmith.compress.export_step",  # export-step-onnx
    "edgesmith.compress.export_rwkv_c",  # export-rwkv-c
    "edgesmith.compress.export_rwkv_pth",  # export-rwkv-pth
    "edgesmith.compress.onnx_mlp",  # import-onnx-mlp
    "edgesmith.compress.import_nir",  # import-nir
    "edgesmith.compress.export_nir",  # export-nir
    "edgesmith.compress.qat_brevitas",  # qat-w8a8, qat-w4a8, qat-brevitas
    "edgesmith.compress.torch_source",  # torch-source
    "edgesmith.compress.qat_loihi",  # qat-w8-loihi
)

__all__ = [
    "Artifact", "LayerReport", "PassConfig", "PassContext", "PassReport", "PassResult", "apply_pass",
    "config_from_dict", "config_from_json", "pass_kinds", "register_pass", "run_passes",
]
