"""Per-layer sensitivity tables of the int8 and int4 passes: one model per layer, scored by evaluate."""
from __future__ import annotations

import onnx
import pytest

from edgesmith.compress import PassContext, apply_pass
from edgesmith.compress.quant_int4 import Int4WeightOnlyConfig
from edgesmith.compress.quant_int8 import Int8QdqConfig
from edgesmith.runtimes import get_runtime


def _quantized_weights(path) -> int:
    """How many weight layers of a model are int8 (QDQ) or int4 (MatMulNBits)."""
    m = onnx.load(str(path))
    int8 = sum(1 for t in m.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2)
    return int8 + sum(1 for n in m.graph.node if n.op_type == "MatMulNBits")


@pytest.mark.parametrize("cfg", [Int8QdqConfig(), Int4WeightOnlyConfig()], ids=["int8", "int4"])
def test_table_has_one_row_per_layer_each_scored_on_a_one_layer_model(digits, digits_onnx, tmp_path, cfg):
    seen = []

    def evaluate(artifact):
        seen.append(_quantized_weights(artifact.path))
        rt = get_runtime("onnxruntime", threads=1).load(artifact)
        return digits.evaluate(lambda x: rt.run(x).outputs).value

    ctx = PassContext(workdir=tmp_path, calibration=digits.calibration_data(), evaluate=evaluate,
                      sensitivity=True, progress=False)
    res = apply_pass(digits_onnx, cfg, ctx)
    rows = res.report.extra["sensitivity"]
    assert [r["layer"] for r in rows] == [layer.name for layer in res.report.layers]
    assert seen == [0, 1, 1, 1]  # the fp32 baseline, then exactly one quantized layer per model
    for r in rows:
        assert r["delta"] == pytest.approx(r["metric"] - r["fp32_metric"])
        assert abs(r["delta"]) <= 0.02
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"model.{cfg.kind[:4]}.onnx"]  # temporaries removed


def test_no_table_unless_requested_and_a_note_when_evaluate_is_missing(digits, digits_onnx, tmp_path):
    calls = []
    ctx = PassContext(workdir=tmp_path / "a", calibration=digits.calibration_data(), evaluate=calls.append,
                      sensitivity=False, progress=False)
    assert "sensitivity" not in apply_pass(digits_onnx, Int8QdqConfig(), ctx).report.extra
    assert calls == []
    ctx = PassContext(workdir=tmp_path / "b", calibration=digits.calibration_data(), sensitivity=True, progress=False)
    report = apply_pass(digits_onnx, Int4WeightOnlyConfig(), ctx).report
    assert "sensitivity" not in report.extra
    assert any("no evaluate function" in note for note in report.notes)
