"""Real pretrained models, as a new user brings them: Silero VAD (a scalar sample-rate input, a recurrent state
whose batch axis is 1, If subgraphs) and PP-OCR's text-direction classifier, deployed end to end on data made here
and scored against labels; `quantize` reads the same model options as `deploy`."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from cli_helpers import assert_user_error, run_cli
from edgesmith.bench import api
from edgesmith.bench.report.schema import DeployReport
from edgesmith.bench.studies.pretrained_fixtures import ppocr, silero_vad, text_lines, text_pages, vad_sequences

FAST = {"reps": 20, "warmup": 2, "tvm": False, "batch_sizes": [1]}


@pytest.fixture(scope="module")
def vad_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("vad")
    x, y = vad_sequences(16, 40, seed=0)
    np.savez(d / "cal.npz", input=x[:6])
    np.savez(d / "eval.npz", input=x[6:])
    np.save(d / "labels.npy", y[6:])
    np.savez(d / "eval_sr.npz", input=x[6:], sr=np.asarray(16000, np.int64))  # the constant as a 0-d array
    return d


def _report(out) -> DeployReport:
    return DeployReport.load(out / "report.json")


def test_silero_vad_int8_keeps_its_speech_accuracy(vad_data, tmp_path):
    out = api.deploy(str(silero_vad()), "host-cpu", out=tmp_path / "vad", model_options={"const": "sr:16000"},
                     calibration_data=vad_data / "cal.npz", eval_data=vad_data / "eval.npz",
                     labels=vad_data / "labels.npy", metric="binary", variants=["fp32", "int8"], **FAST)
    report = _report(out)
    fp32, int8 = report.row("fp32", "onnxruntime"), report.row("int8", "onnxruntime")
    assert not report.failed_runs
    # the real model on real (synthesized) speech: well above the 0.5 a constant answer would get on this data
    assert fp32.evaluation.value > 0.8
    assert int8.evaluation.value > fp32.evaluation.value - 0.05
    notes = " ".join(report.notes)
    assert "input sr pinned to 16000" in notes and "state -> stateN" in notes
    # the cost model counted every layer behind the If that the pinned rate left: 6 Convs and the LSTM
    sources = _workload_sources(report.to_dict())
    assert sources and all("7 MatMul/Gemm/Conv-type and recurrent nodes" in s and "not counted" not in s
                           for s in sources)


def _workload_sources(d) -> list[str]:
    if isinstance(d, dict):
        found = [d["source"]] if str(d.get("source", "")).startswith("ONNX graph analysis") else []
        return found + [s for v in d.values() for s in _workload_sources(v)]
    return [s for v in d for s in _workload_sources(v)] if isinstance(d, list) else []


def test_a_zero_dim_array_in_the_data_pins_a_scalar_input(vad_data, tmp_path):
    out = api.deploy(str(silero_vad()), "host-cpu", out=tmp_path / "vad", eval_data=vad_data / "eval_sr.npz",
                     variants=["fp32"], **FAST)
    assert any("input sr pinned to 16000" in n for n in _report(out).notes)


def test_a_scalar_input_left_unpinned_is_one_error_naming_const(vad_data, tmp_path, capsys):
    code, _, err = run_cli(capsys, "deploy", silero_vad(), "--target", "host-cpu", "--out", tmp_path / "o",
                           "--eval-data", vad_data / "eval.npz", "--quiet", "--no-tvm")
    assert_user_error(code, err, "'sr' is a scalar", "--model-option const=sr:VALUE")
    assert not (tmp_path / "o").exists()


def test_quantize_reads_the_model_options_deploy_reads(vad_data, tmp_path, capsys):
    out = tmp_path / "vad.int8.onnx"
    code, stdout, err = run_cli(capsys, "quantize", silero_vad(), "--pass", "int8-qdq", "--out", out,
                                "--model-option", "const=sr:16000", "--model-option", "state=state:stateN@1",
                                "--calibration-data", vad_data / "cal.npz", "--quiet")
    assert code == 0, err
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)  # If subgraphs included: nodes in dependency order
    assert {i.name for i in model.graph.input} == {"input", "state"}  # sr is a constant of the file
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node)


def test_ppocr_text_direction_classifier_int8_keeps_its_accuracy(tmp_path):
    x, y = text_lines(96, seed=0)
    np.save(tmp_path / "cal.npy", x[:32])
    name = onnx.load(str(ppocr("cls")), load_external_data=False).graph.input[0].name
    np.savez(tmp_path / "eval.npz", **{name: x[32:], "labels": y[32:]})
    out = api.deploy(str(ppocr("cls")), "host-cpu", out=tmp_path / "cls", calibration_data=tmp_path / "cal.npy",
                     eval_data=tmp_path / "eval.npz", variants=["fp32", "int8"], **FAST)
    report = _report(out)
    fp32, int8 = report.row("fp32", "onnxruntime"), report.row("int8", "onnxruntime")
    assert fp32.evaluation.metric == "accuracy" and fp32.evaluation.value > 0.9
    assert int8.evaluation.value >= fp32.evaluation.value - 0.03


@pytest.mark.parametrize("name", ["det", "rec"])
def test_ppocr_detector_and_recognizer_deploy_with_int8_and_int4_where_they_apply(name, tmp_path):
    # no labels: scored by fidelity to fp32; the detector has no MatMul, so int4 is listed as not built
    x = text_pages(6, seed=0) if name == "det" else text_lines(24, seed=0, width=320, flip=False)[0]
    np.save(tmp_path / "cal.npy", x[: len(x) // 2])
    np.save(tmp_path / "eval.npy", x[len(x) // 2:])
    out = api.deploy(str(ppocr(name)), "host-cpu", out=tmp_path / name, calibration_data=tmp_path / "cal.npy",
                     eval_data=tmp_path / "eval.npy", **FAST)
    report = _report(out)
    assert not report.failed_runs
    rows = {r.variant: r.evaluation.value for r in report.results}
    assert rows["fp32"] == 200.0 and 5.0 < rows["int8"] < 200.0  # fidelity in dB; 200 means identical
    if name == "det":
        assert "int4" not in rows and "int4" in report.plan.not_built
    else:
        assert 5.0 < rows["int4"] < 200.0
