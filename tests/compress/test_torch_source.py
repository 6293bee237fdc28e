"""torch-source: an ONNX export hands its torch module on to training passes; a plain ONNX file cannot."""
from __future__ import annotations

import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.torch_source import TorchSourceConfig


def test_the_module_behind_an_onnx_export_comes_back_as_a_torch_artifact(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(4, 2))
    (tmp_path / "m.onnx").write_bytes(b"not read")
    art, reports = run_passes(Artifact("onnx", path=tmp_path / "m.onnx", module=net, meta={"input_shape": [4]}),
                              [TorchSourceConfig()], PassContext(workdir=tmp_path / "w"))
    assert art.format == "torch" and art.module is net and art.meta["input_shape"] == [4]
    assert reports[0].output_format == "torch"


def test_a_plain_onnx_file_is_a_readable_error(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"not read")
    with pytest.raises(EdgesmithError, match="no torch module"):
        run_passes(Artifact("onnx", path=tmp_path / "m.onnx"), [TorchSourceConfig()], PassContext(workdir=tmp_path / "w"))
