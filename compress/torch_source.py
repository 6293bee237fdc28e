"""``torch-source``: from an ONNX export back to the torch module it was exported from.

A user's ``file.py:factory`` model is exported to ONNX when it is loaded and deployed like any ONNX file, but
training passes (brevitas QAT) need the module itself. The source keeps it on the ONNX artifact
(``Artifact.module``); this pass hands it on as a ``torch`` artifact so a plan can write
``[TorchSourceConfig(), QatW8A8Config()]``. An ONNX file a user brought has no module to go back to: that is
a readable error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass


def torch_source(producer):
    """The torch module behind ``producer``: its own (torch producers) or the one its ONNX was exported from;
    None when there is none."""
    from torch import nn

    module = getattr(producer, "module_", None) if producer.native_format == "onnx" else \
        (producer.module if producer.native_format == "torch" else None)
    return module if isinstance(module, nn.Module) else None


@dataclass
class TorchSourceConfig(PassConfig):
    kind: ClassVar[str] = "torch-source"
    contract_fixture: ClassVar[str] = "mlp-onnx-with-module"
    input_format: ClassVar[str] = "onnx"
    output_format: ClassVar[str] = "torch"


@register_pass(TorchSourceConfig)
def _torch_source(artifact: Artifact, config: TorchSourceConfig, ctx: PassContext) -> PassResult:
    from torch import nn

    if not isinstance(artifact.module, nn.Module):
        raise EdgesmithError(f"{artifact.describe()} carries no torch module it was exported from, so it cannot be "
                             "fine-tuned.", "deploy the torch model (path/to/file.py:factory) to train it; an ONNX "
                             "file is compressed after training only (int8, int4).")
    new = Artifact("torch", module=artifact.module.eval(), meta=dict(artifact.meta))
    report = PassReport(config.to_dict(), "onnx", "torch", artifact.size_bytes(), new.size_bytes(),
                        notes=["the torch module this ONNX file was exported from, for the passes that train it"])
    return PassResult(new, report)
