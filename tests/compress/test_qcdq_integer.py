"""Lowering brevitas QCDQ Linear layers to onnxruntime's integer MatMulIntegerToFloat (qat form ``ort-integer``)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, config_from_dict, run_passes
from edgesmith.compress.onnx_analysis import fused_kernels
from edgesmith.compress.qat_brevitas import QatW8A8Config, calibrate, export_qcdq, quantized_copy
from edgesmith.compress.qcdq_integer import lower_gemms


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 5)).eval()


def _run(path, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _qat(tmp_path, form, module=None, **options):
    x = np.random.default_rng(0).normal(size=(256, 16)).astype(np.float32)
    ctx = PassContext(workdir=tmp_path / form, example_input=x[:1], train_data=x, calibration=x[:64], progress=False)
    (tmp_path / form).mkdir(exist_ok=True)
    cfg = config_from_dict({"kind": "qat-w8a8", "epochs": 1, "form": form, **options})
    art, reports = run_passes(Artifact("torch", module=module or _mlp()), [cfg], ctx)
    return art, reports[-1], x


def test_every_linear_becomes_one_integer_kernel_and_no_float_gemm_is_left(tmp_path):
    art, report, _ = _qat(tmp_path, "ort-integer")
    ops = [n.op_type for n in onnx.load(str(art.path)).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 3 and "Gemm" not in ops and "DequantizeLinear" not in ops
    kernels = fused_kernels(art.path)
    assert kernels["integer"] == 3 and kernels["float"] == 0
    assert report.extra["export"]["integer_gemms"] == 3
    assert any("MatMulIntegerToFloat" in note for note in report.notes)


def test_the_lowered_graph_computes_what_the_qcdq_graph_means(tmp_path):
    qcdq, _, x = _qat(tmp_path, "qcdq")
    low, report, _ = _qat(tmp_path, "ort-integer")  # same seed and data: the same fine-tuned model
    a, b = _run(qcdq.path, x), _run(low.path, x)
    # int32 sums vs fp32 sums of dequantized values: equal up to float rounding, plus an occasional
    # one-step flip where an inner activation sits on a quantizer's rounding edge
    assert np.abs(a - b).max() <= 0.02 * np.abs(a).max()
    assert np.mean(a.argmax(1) == b.argmax(1)) >= 0.97
    assert report.extra["export"]["lowering_argmax_agreement"] >= 0.95


def test_8bit_weights_at_full_range_do_not_saturate(tmp_path):
    # On AVX2 without VNNI a u8 x s8 kernel sums pairs in saturating int16; weights of +-127 against activations
    # near 255 overflow it. The lowering multiplies u8 x u8, which must match an exact integer reference.
    torch.manual_seed(1)
    lin = nn.Sequential(nn.Linear(128, 8)).eval()
    with torch.no_grad():
        lin[0].weight.copy_(torch.sign(torch.randn(8, 128)))  # every weight at +-max after per-channel scaling
    cfg = QatW8A8Config(epochs=0)
    q, _ = quantized_copy(lin, cfg)
    x = np.abs(np.random.default_rng(1).normal(size=(64, 128))).astype(np.float32) + 1.0
    calibrate(q, x, cfg)
    export_qcdq(q, x[:1], tmp_path / "q.onnx")
    low, n = lower_gemms(onnx.load(str(tmp_path / "q.onnx")))
    assert n == 1
    onnx.save(low, str(tmp_path / "low.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in low.graph.initializer}
    node = next(n for n in low.graph.node if n.op_type == "MatMulIntegerToFloat")
    quant = next(n for n in low.graph.node if n.op_type == "QuantizeLinear")
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in low.graph.node if n.op_type == "Constant"}
    s_x = float({**inits, **consts}[quant.input[1]])
    z_x = int(inits[quant.input[2]])
    qx = np.clip(np.rint(x / s_x) + z_x, 0, 255).astype(np.int64)
    w = inits[node.input[1]].astype(np.int64) - inits[node.input[5]].astype(np.int64)
    exact = ((qx - z_x) @ w) * inits[node.input[3]].astype(np.float64) * s_x + lin[0].bias.detach().numpy()
    assert np.abs(w).max() == 127  # the case that saturates a u8 x s8 kernel
    got = _run(tmp_path / "low.onnx", x)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


def test_narrow_activations_keep_their_clip(tmp_path):
    art, _, x = _qat(tmp_path, "ort-integer", act_bits=4)
    qcdq, _, _ = _qat(tmp_path, "qcdq", act_bits=4)
    nodes = onnx.load(str(art.path)).graph.node
    assert sum(n.op_type == "Clip" for n in nodes) == 3  # one per layer input, moved to the uint8 range
    a, b = _run(qcdq.path, x), _run(art.path, x)
    # a flip at a 4-bit quantizer moves an output by a sixteenth of the range, so count rows that agree to float
    # rounding instead of bounding the worst row
    same = np.abs(a - b).max(axis=1) <= 1e-5 * np.abs(a).max()
    assert same.mean() >= 0.9


def test_convolutions_stay_qcdq_and_the_linear_head_is_lowered(tmp_path):
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv1d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14, 3)).eval()
    x = np.random.default_rng(0).normal(size=(64, 1, 16)).astype(np.float32)
    ctx = PassContext(workdir=tmp_path, example_input=x[:1], train_data=x, calibration=x, progress=False)
    art, _ = run_passes(Artifact("torch", module=cnn), [QatW8A8Config(epochs=0, form="ort-integer")], ctx)
    ops = [n.op_type for n in onnx.load(str(art.path)).graph.node]
    assert "Conv" in ops and ops.count("MatMulIntegerToFloat") == 1


def test_form_is_validated_and_round_trips():
    cfg = QatW8A8Config(form="ort-integer")
    assert config_from_dict(json.loads(cfg.to_json())) == cfg
    with pytest.raises(EdgesmithError, match="form"):
        QatW8A8Config(form="int4-packed")


def test_a_graph_without_qcdq_gemms_is_returned_unchanged():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = onnx.helper.make_graph([onnx.helper.make_node("Gemm", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = onnx.helper.make_model(graph)
    low, n = lower_gemms(model)
    assert n == 0 and [node.op_type for node in low.graph.node] == ["Gemm"]
