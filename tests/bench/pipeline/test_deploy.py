"""End-to-end deploys: the report folder is complete, labelled honestly, and never half-written."""
from __future__ import annotations

import json

import numpy as np

import pytest

from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
from edgesmith.hardware import PlanOptions
from edgesmith.common import EdgesmithError

FAST = dict(warmup=2, reps=5, batch_sizes=(1,), progress=False)


def test_host_cpu_deploy_writes_json_markdown_and_plots(tmp_path):
    out = deploy(DeployOptions("digits-mlp", "host-cpu", tmp_path / "r",
                               plan=PlanOptions(tvm=False, variants=("fp32", "int8", "int4")), **FAST))
    files = {p.name for p in out.iterdir()}
    assert {"report.json", "report.md", "latency.png", "metric_vs_size.png", "per_layer_error.png"} <= files
    report = json.loads((out / "report.json").read_text())
    rows = {r["variant"]: r for r in report["results"]}
    assert set(rows) == {"fp32", "int8", "int4"}
    ref = report["reference"]["evaluation"]["value"]
    for r in rows.values():
        # host latency is measured here; energy has no meter here, so it must say estimated
        assert r["latency"]["1"]["provenance"] == "measured"
        assert r["energy"]["provenance"] == "estimated"
        assert abs(r["evaluation"]["value"] - ref) < 0.03
    assert rows["fp32"]["max_abs_diff"] < 1e-4
    assert rows["int4"]["size_bytes"] < rows["int8"]["size_bytes"] < rows["fp32"]["size_bytes"]
    md = (out / "report.md").read_text()
    assert "measured" in md and "estimated" in md


def test_jetson_deploy_labels_latency_and_energy_as_estimated(tmp_path):
    out = deploy(DeployOptions("digits-mlp", "jetson-orin-nano", tmp_path / "j", **FAST))
    report = json.loads((out / "report.json").read_text())
    assert report["results"]
    for r in report["results"]:
        assert r["latency"]["1"]["provenance"] == "estimated"
        assert r["energy"]["provenance"] == "estimated"
        assert r["latency"]["1"]["p50"] > 0
    _assert_tensorrt_qdq(out / "artifacts" / "int8" / "model.int8.onnx")


def _assert_tensorrt_qdq(path):
    """TensorRT's explicit quantization: every Q/DQ pair int8 with zero point 0 (activations and weights), weights
    per output channel over the full int8 range, a DequantizeLinear in front of every MatMul input."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    for n in qdq:
        zero_point = init[n.input[2]]
        assert zero_point.dtype == np.int8 and not zero_point.any()
    weights = [init[n.input[0]] for n in qdq if n.op_type == "DequantizeLinear" and n.input[0] in init]
    assert weights and all(w.dtype == np.int8 and np.abs(w).max() == 127 for w in weights)  # 8 bits, not 7
    made_by = {o: n.op_type for n in model.graph.node for o in n.output}
    assert all(made_by.get(i) == "DequantizeLinear" for n in model.graph.node if n.op_type == "MatMul" for i in n.input)


def test_existing_report_folder_needs_force(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "keep.txt").write_text("mine")
    with pytest.raises(EdgesmithError, match="--force"):
        deploy(DeployOptions("digits-mlp", "host-cpu", tmp_path / "r", **FAST))
    assert (tmp_path / "r" / "keep.txt").read_text() == "mine"


def test_failed_deploy_leaves_no_half_written_folder(tmp_path, monkeypatch):
    import edgesmith.bench.pipeline.deploy as d

    def boom(*a, **k):
        raise RuntimeError("simulated crash in the middle of a deploy")

    monkeypatch.setattr(d, "write_report", boom)
    with pytest.raises(RuntimeError):
        deploy(DeployOptions("digits-mlp", "host-cpu", tmp_path / "r",
                             plan=PlanOptions(tvm=False, variants=("fp32",)), **FAST))
    assert not (tmp_path / "r").exists()
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone too


def test_unknown_variant_is_a_user_error(tmp_path):
    with pytest.raises(EdgesmithError, match="int2"):
        deploy(DeployOptions("digits-mlp", "host-cpu", tmp_path / "r", plan=PlanOptions(variants=("int2",)), **FAST))


@pytest.mark.lava
def test_loihi2_deploy_checks_lava_against_the_bit_exact_reference(tmp_path, monkeypatch):
    from edgesmith.models.digits import DigitsSmall

    full = DigitsSmall.ood_inputs
    # a quarter of each OOD set: the monitor takes the same path through Lava at a quarter of the simulation time
    monkeypatch.setattr(DigitsSmall, "ood_inputs", lambda self: {k: v[:90] for k, v in full(self).items()})
    out = deploy(DeployOptions("digits-mlp", "loihi2", tmp_path / "l", **FAST))
    report = json.loads((out / "report.json").read_text())
    (row,) = report["results"]
    assert row["runtime"] == "lava"
    assert row["bit_exact_reference"]["max_abs_diff"] == 0.0
    assert row["bit_exact_reference"]["activity_equal"]
    assert row["bit_exact_reference"]["n_samples"] == 360
    assert row["activity"]["synops"] > 0 and row["activity"]["timesteps"] > 0
    assert row["energy"]["provenance"] == "estimated" and row["latency"]["1"]["provenance"] == "estimated"
    ref = report["reference"]["evaluation"]["value"]
    assert abs(row["evaluation"]["value"] - ref) < 0.02
    assert "bit-exact reference" in (out / "report.md").read_text()
    # the OOD monitor reads the Lava outputs too (most of this test's time): all four sets, scores close to fp32's
    ood, ood_ref = row["ood"], report["ood_reference"]
    assert ood["sets"] == {"id": 90, "noise": 90, "rotated": 90, "inverted": 90}
    assert abs(ood["auroc"]["mahalanobis"]["pooled"] - ood_ref["auroc"]["mahalanobis"]["pooled"]) < 0.05
    assert all(rate < 0.15 for rate in ood["id_flag_rate_at_fp32_threshold"].values())  # 0.05 if nothing moved


def _digits_with_hints(monkeypatch):
    """digits-mlp under another name, declaring no int4 and one report note (the producer hooks)."""
    import edgesmith.models.base as mb
    from edgesmith.models.digits import DigitsSmall

    class Hinted(DigitsSmall):
        name = "digits-hinted"

        def __init__(self, seed=0, note="eigendecomposition runs outside the graph"):
            super().__init__(seed=seed)
            self.note = note

        def unsupported_formats(self):
            return {"int4": "no weights worth 4-bit packing"}

        def report_notes(self):
            return [self.note]

        def unsupported_runtimes(self):
            return {"tvm": "simulated: too slow untuned", "onnxruntime": "ignored: the target's own runtime"}

    mb.PRODUCERS.names()  # the registered producers first, then one more for this test only
    monkeypatch.setitem(mb.PRODUCERS._entries, "digits-hinted", Hinted)


def test_producer_hints_drop_variants_and_reach_the_report_notes(tmp_path, monkeypatch):
    _digits_with_hints(monkeypatch)
    out = deploy(DeployOptions("digits-hinted", "host-cpu", tmp_path / "h", plan=PlanOptions(tvm=True),
                               model_options={"note": "U and lambda are inputs"}, **FAST))
    report = json.loads((out / "report.json").read_text())
    assert {(r["variant"], r["runtime"]) for r in report["results"]} == {("fp32", "onnxruntime"), ("int8", "onnxruntime")}
    assert any("tvm left out for this model: simulated: too slow untuned" in n for n in report["plan"]["notes"])
    assert "U and lambda are inputs" in report["notes"]
    assert any("int4" in n for n in report["plan"]["notes"])
    with pytest.raises(EdgesmithError, match="no int4 variant"):
        deploy(DeployOptions("digits-hinted", "host-cpu", tmp_path / "h2",
                             plan=PlanOptions(tvm=False, variants=("int4",)), **FAST))


def test_unknown_model_option_is_a_user_error(tmp_path):
    with pytest.raises(EdgesmithError, match=r"does not take the option\(s\) no_such"):
        deploy(DeployOptions("digits-mlp", "host-cpu", tmp_path / "x", model_options={"no_such": 1}, **FAST))
    assert not (tmp_path / "x").exists()


def test_a_backend_that_cannot_run_the_model_is_reported_as_failed_not_fatal(tmp_path, monkeypatch):
    import edgesmith.bench.pipeline.deploy as d

    real = d._VariantRun.row

    def tvm_breaks(self, art, variant, rt_name, *a, **k):
        if rt_name == "tvm":
            raise RuntimeError("simulated: TVM cannot lower op Foo")
        return real(self, art, variant, rt_name, *a, **k)

    monkeypatch.setattr(d._VariantRun, "row", tvm_breaks)
    out = deploy(DeployOptions("digits-mlp", "host-cpu", tmp_path / "f", plan=PlanOptions(tvm=True, variants=("fp32",)),
                               **FAST))
    report = json.loads((out / "report.json").read_text())
    assert [r["runtime"] for r in report["results"]] == ["onnxruntime"]
    assert report["failed_runs"] == [{"variant": "fp32", "runtime": "tvm", "runtime_label": "tvm (untuned)",
                                      "error": "RuntimeError: simulated: TVM cannot lower op Foo"}]
    assert "simulated: TVM cannot lower op Foo" in (out / "report.md").read_text()
