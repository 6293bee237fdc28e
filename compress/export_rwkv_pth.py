"""``export-rwkv-pth``: an RWKV-6/7 model as a checkpoint in the official layout, which BlinkDL's ``rwkv`` package loads.

Quantized block linears (an edgesmith RWKV quantizer's output) are dequantized first; ``dtype`` is the weights' type in
the file (fp16, the official checkpoints' own, bf16 or fp32). ``edgesmith export MODEL --out FILE.pth`` runs it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import Artifact, PassConfig, PassReport, PassResult, register_pass

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


@dataclass
class ExportRwkvPthConfig(PassConfig):
    kind: ClassVar[str] = "export-rwkv-pth"
    contract_fixture: ClassVar[str] = "rwkv-torch"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "rwkv-pth"

    dtype: str = "fp16"

    def validate(self) -> None:
        if self.dtype not in DTYPES:
            raise EdgesmithError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}.", "use --dtype fp16, bf16 or fp32.")


@register_pass(ExportRwkvPthConfig)
def export_rwkv_pth(artifact: Artifact, config: ExportRwkvPthConfig, ctx) -> PassResult:
    import torch

    from edgesmith.compress.rwkvquant.qcheckpoint import dequantized_model
    from edgesmith.models.rwkv.checkpoint import save_rwkv
    from edgesmith.models.rwkv.rwkv6 import RWKV6
    from edgesmith.models.rwkv.rwkv7 import RWKV7

    module = artifact.module
    if not isinstance(module, (RWKV6, RWKV7)):
        raise EdgesmithError(f"only RWKV models export to an official .pth; this one is {type(module).__name__}.",
                             "export it to .onnx instead.")
    out = save_rwkv(dequantized_model(module), ctx.workdir / "model.pth", dtype=getattr(torch, DTYPES[config.dtype]),
                    force=True)
    new = Artifact("rwkv-pth", path=out, meta={k: v for k, v in artifact.meta.items() if k != "recurrent"})
    return PassResult(new, PassReport(config.to_dict(), "torch", "rwkv-pth", artifact.size_bytes(), new.size_bytes(),
                                      notes=[f"official layout, {config.dtype} weights, quantized layers dequantized"]))
