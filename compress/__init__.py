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

__all__ = [
    "Artifact", "LayerReport", "PassConfig", "PassContext", "PassReport", "PassResult", "apply_pass",
    "config_from_dict", "config_from_json", "pass_kinds", "register_pass", "run_passes",
]
