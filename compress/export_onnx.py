"""Export a torch module to ONNX (fp32), the format the onnxruntime and TVM runtimes load.

Linear layers are exported as ``MatMul`` + ``Add`` rather than ``Gemm`` by default: onnxruntime's
4-bit weight-only quantizer (MatMulNBits) only rewrites MatMul nodes, and int8 per-channel QDQ
handles both. The batch dimension is dynamic.
"""
from __future__ import annotations

import copy
import io
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.common import EdgesmithError, atomic_path

INPUT_NAME = "input"
OUTPUT_NAME = "output"


class MatMulLinear(nn.Module):
    """``x @ W^T + b`` written so the ONNX exporter emits MatMul with a constant [in, out] weight."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight_t = nn.Parameter(linear.weight.detach().t().contiguous(), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x):
        y = torch.matmul(x, self.weight_t)
        return y if self.bias is None else y + self.bias


def linears_as_matmul(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` with every ``nn.Linear`` swapped for ``MatMulLinear``."""
    module = copy.deepcopy(module)

    def swap(parent: nn.Module):
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                setattr(parent, name, MatMulLinear(child))
            else:
                swap(child)

    if isinstance(module, nn.Linear):
        return MatMulLinear(module)
    swap(module)
    return module


@dataclass
class ExportOnnxConfig(PassConfig):
    kind: ClassVar[str] = "export-onnx"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "onnx"

    opset: int = 17
    linear_as_matmul: bool = True
    dynamic_batch: bool = True

    def validate(self) -> None:
        if not 13 <= self.opset <= 21:
            self._fail("opset", f"is {self.opset}", "use an opset between 13 and 21 (17 is the default).")


def export_module_to_onnx(module: nn.Module, example: np.ndarray, path, *, opset: int = 17,
                          linear_as_matmul: bool = True, dynamic_batch: bool = True) -> None:
    """Export ``module`` for inputs shaped like ``example`` to ``path`` (written atomically)."""
    import onnx

    m = linears_as_matmul(module) if linear_as_matmul else module
    m.eval()
    x = torch.from_numpy(np.ascontiguousarray(example, dtype=np.float32))
    buf = io.BytesIO()
    dyn = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, (x,), buf, input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                              opset_version=opset, dynamic_axes=dyn, dynamo=False)
    except Exception as e:  # the exporter raises many types; all mean "this model cannot be exported"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EdgesmithError(
            f"ONNX export failed: {first[:300]}",
            "replace the unsupported operation (see the message) with exportable ops, "
            "or keep this step outside the graph.",
        ) from None
    model = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(model)
    with atomic_path(path, force=True) as tmp:
        onnx.save(model, str(tmp))


@register_pass(ExportOnnxConfig)
def _export_onnx(artifact: Artifact, config: ExportOnnxConfig, ctx: PassContext) -> PassResult:
    if ctx.example_input is None:
        raise EdgesmithError("export-onnx needs an example input to fix shapes.", "pass the producer's example input.")
    out = ctx.workdir / "model.fp32.onnx"
    export_module_to_onnx(artifact.module, ctx.example_input, out, opset=config.opset,
                          linear_as_matmul=config.linear_as_matmul, dynamic_batch=config.dynamic_batch)
    new = Artifact("onnx", path=out, meta={**artifact.meta, "input_name": INPUT_NAME, "output_name": OUTPUT_NAME,
                                            "input_shape": list(ctx.example_input.shape[1:]), "precision": "fp32"})
    size_before = artifact.size_bytes()
    report = PassReport(config.to_dict(), "torch", "onnx", size_before, new.size_bytes(), bits_per_weight=32.0)
    return PassResult(new, report)
