"""``fp16``: an ONNX model's float weights and activations as float16, its inputs and outputs kept float32.

onnxruntime's own converter (``onnxruntime.transformers.float16``) writes the graph: float initializers become
float16 and Casts stand at the inputs and outputs, so the model is fed and read as before. The Jetson plans it: its
tensor cores run fp16 at twice the fp32 rate, which its cost model prices (the converted file's float16 weights
say which rate applies); onnxruntime on this CPU runs the same file as the numerical proxy of its outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx
from onnx import numpy_helper

from edgesmith.common import atomic_path
from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.compress.quant_int8 import refuse_quantized


@dataclass
class Fp16Config(PassConfig):
    """``keep_fp32``: operator types left in float32 (e.g. ``("Softmax",)``)."""

    kind: ClassVar[str] = "fp16"
    input_format: ClassVar[str] = "onnx"
    output_format: ClassVar[str] = "onnx"

    keep_fp32: tuple[str, ...] = ()

    def validate(self) -> None:
        if not isinstance(self.keep_fp32, tuple) or not all(isinstance(t, str) and t for t in self.keep_fp32):
            self._fail("keep_fp32", f"is {self.keep_fp32!r}", "list operator types, e.g. [\"Softmax\"].")


@register_pass(Fp16Config)
def fp16(artifact: Artifact, config: Fp16Config, ctx: PassContext) -> PassResult:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    model = onnx.load(str(artifact.path))
    refuse_quantized(model, artifact.describe())
    half = convert_float_to_float16(model, keep_io_types=True,
                                    op_block_list=list(DEFAULT_OP_BLOCK_LIST) + list(config.keep_fp32))
    out = ctx.workdir / "model.fp16.onnx"
    with atomic_path(out, force=True) as tmp:
        onnx.save(half, str(tmp))
    floats = [numpy_helper.to_array(t) for t in half.graph.initializer]
    n16 = sum(a.size for a in floats if a.dtype == np.float16)
    n32 = sum(a.size for a in floats if a.dtype == np.float32)
    new = Artifact("onnx", path=out, meta=dict(artifact.meta))
    notes = [f"{n16} float16 and {n32} float32 weight values; inputs and outputs stay float32 (Casts at the edges)"]
    if config.keep_fp32:
        notes.append(f"kept in float32: {', '.join(config.keep_fp32)} (beside onnxruntime's default list)")
    bpw = 16.0 * n16 / (n16 + n32) + 32.0 * n32 / (n16 + n32) if n16 + n32 else None
    return PassResult(new, PassReport(config.to_dict(), "onnx", "onnx", artifact.size_bytes(), new.size_bytes(),
                                      bits_per_weight=bpw, notes=notes))
