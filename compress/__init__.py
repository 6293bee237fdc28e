"""Compression and export passes: one config dataclass + one registered handler per pass.

Registration: one import line per pass module below.
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

from compress import export_onnx  # noqa: F401  (export-onnx)
from compress import export_lava  # noqa: F401  (export-lava)
from compress import quant_int8  # noqa: F401  (int8-qdq)
from compress import quant_int4  # noqa: F401  (int4-weight-only)
from compress import prune  # noqa: F401  (prune-magnitude)

__all__ = [
    "Artifact", "LayerReport", "PassConfig", "PassContext", "PassReport", "PassResult", "apply_pass",
    "config_from_dict", "config_from_json", "pass_kinds", "register_pass", "run_passes",
]
