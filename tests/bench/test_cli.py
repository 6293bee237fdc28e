"""The CLI's contract with users: clear one-line errors for bad input, exit status 2, nothing half-written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import assert_user_error, run_cli


@pytest.fixture
def onnx_file(digits_onnx, tmp_path) -> Path:
    p = tmp_path / "digits.onnx"
    p.write_bytes(Path(digits_onnx.path).read_bytes())
    return p


def test_targets_lists_every_coefficient_with_its_source(capsys):
    code, out, _ = run_cli(capsys, "targets", "--json")
    assert code == 0
    targets = {t["name"]: t for t in json.loads(out)}
    assert {"host-cpu", "jetson-orin-nano", "loihi2"} <= set(targets)
    for t in targets.values():
        assert t["coefficients"], t["name"]
        assert all(c["source"] for c in t["coefficients"])
    # the host's package figures are some part's: which one, and why, is stated
    code, out, _ = run_cli(capsys, "targets")
    assert f"cost profile: {targets['host-cpu']['cost_profile']['assumption']}" in out


def test_models_and_passes_are_listed(capsys):
    assert run_cli(capsys, "models")[1].count("digits-") >= 2
    out = run_cli(capsys, "passes")[1]
    for kind in ("export-onnx", "int8-qdq", "int4-weight-only", "prune-magnitude", "export-netx"):
        assert kind in out


def test_runtimes_are_listed_with_their_formats_and_whether_they_run_here(capsys, monkeypatch):
    from edgesmith.runtimes.base import RUNTIMES

    monkeypatch.setattr(RUNTIMES.get("openvino"), "available",
                        classmethod(lambda cls: (False, "the openvino package is not installed. Fix: pip install x")))
    out = run_cli(capsys, "runtimes")[1]
    assert "onnxruntime: loads onnx;" in out and "available" in out
    assert "openvino: loads onnx;" in out and "not available: the openvino package is not installed" in out


def test_deploy_runtime_flags_and_a_recipes_plan_runtimes_reach_the_plan(tmp_path):
    from edgesmith.bench.cli import build_parser
    from edgesmith.bench.recipe import check_deploy_table, deploy_options
    from edgesmith.common import EdgesmithError

    args = build_parser().parse_args(["deploy", "digits-mlp", "--target", "host-cpu", "--runtime", "openvino",
                                      "--runtime", "tvm"])
    assert deploy_options(args, {}).plan.runtimes == ("openvino", "tvm")
    args = build_parser().parse_args(["deploy", "digits-mlp", "--target", "host-cpu"])
    assert deploy_options(args, {"plan": {"runtimes": ["openvino"]}}).plan.runtimes == ("openvino",)
    with pytest.raises(EdgesmithError, match="runtimes"):
        check_deploy_table({"plan": {"runtimes": [1]}}, "recipe")


def test_unknown_target_is_a_user_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "tpu-v9", "--out", tmp_path / "r")
    assert_user_error(code, err, "tpu-v9", "host-cpu")
    assert not (tmp_path / "r").exists()


def test_unknown_model_is_a_user_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "export", "resnet-9000", "--out", tmp_path / "m.onnx")
    assert_user_error(code, err, "resnet-9000")


def test_export_passes_options_to_the_kinds_export_pass(capsys, tmp_path):
    import onnx

    code, out, _ = run_cli(capsys, "export", "rwkv7-ref", "--out", tmp_path / "d.onnx", "--option", "batch=1")
    assert code == 0 and "wrote" in out
    dims = [d for i in onnx.load(tmp_path / "d.onnx").graph.input for d in i.type.tensor_type.shape.dim]
    assert all(d.dim_value > 0 for d in dims)  # a decode graph: the batch is fixed too
    code, _, err = run_cli(capsys, "export", "digits-mlp", "--out", tmp_path / "m.onnx", "--option", "batch=1")
    assert_user_error(code, err, "batch")
    assert not (tmp_path / "m.onnx").exists()


def test_a_quantized_rwkv_file_exports_to_a_decode_graph_with_its_vq_layers_as_int8(capsys, tmp_path):
    import collections

    import onnx

    from edgesmith.compress.rwkvquant import make_config, quantize_rwkv, save_quantized
    from edgesmith.models import get_producer
    from edgesmith.models.rwkv.data import load_splits, sequences

    calib = sequences(load_splits().train, 64, 8, seed=0)
    q, rep = quantize_rwkv(get_producer("rwkv7-ref").build().module_, calib,
                           make_config("rwkvquant", bits=4, n_calibration=8, sq_percentile=50.0, kmeans_iters=3))
    path = save_quantized(q, tmp_path / "q.quantized.pth")
    code, out, err = run_cli(capsys, "export", path, "--out", tmp_path / "q.onnx", "--option", "batch=1",
                             "--option", "vq_form=int8")
    assert code == 0, err
    bits = collections.Counter(a.i for n in onnx.load(tmp_path / "q.onnx").graph.node if n.op_type == "MatMulNBits"
                               for a in n.attribute if a.name == "bits")
    assert bits == {4: rep.extra["n_sq"], 8: rep.extra["n_vq"]} and rep.extra["n_vq"] > 0


def test_a_quantized_rwkv_file_exports_to_the_c_decoder_with_its_codes(capsys, tmp_path):
    from edgesmith.compress import Artifact
    from edgesmith.compress.rwkvquant import make_config, quantize_rwkv, save_quantized
    from edgesmith.models import get_producer
    from edgesmith.models.rwkv.data import load_splits, sequences
    from edgesmith.runtimes import get_runtime

    model = get_producer("rwkv7-ref").build().module_
    q, _ = quantize_rwkv(model, sequences(load_splits().train, 64, 8, seed=0), make_config("rtn", bits=4))
    path = save_quantized(q, tmp_path / "q.quantized.pth")
    code, out, err = run_cli(capsys, "export", path, "--out", tmp_path / "q.rwkvc.npz")
    assert code == 0, err
    with np.load(tmp_path / "q.rwkvc.npz") as z:
        assert sum(k.endswith(".q") for k in z.files) == 12 and not any(k.startswith("L0.r.w") for k in z.files)
    tokens = np.array([[72, 101, 108, 108, 111]])
    got = get_runtime("rwkv-c", threads=1).load(Artifact("rwkv-c", path=tmp_path / "q.rwkvc.npz")).run(tokens).outputs
    ref = q(__import__("torch").as_tensor(tokens))[0].detach().numpy()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.03  # int8 activations, the same 4-bit codes
    code, _, err = run_cli(capsys, "export", "digits-mlp", "--out", tmp_path / "mlp.rwkvc.npz")
    assert_user_error(code, err, "export-rwkv-c takes an RWKV language model")
    assert not (tmp_path / "mlp.rwkvc.npz").exists()


def test_unknown_pass_is_a_user_error(capsys, onnx_file, tmp_path):
    code, _, err = run_cli(capsys, "quantize", onnx_file, "--pass", "int3-magic", "--out", tmp_path / "q.onnx")
    assert_user_error(code, err, "int3-magic")


def test_unknown_pass_option_is_a_user_error(capsys, onnx_file, tmp_path):
    code, _, err = run_cli(capsys, "quantize", onnx_file, "--pass", "int4-weight-only", "--option", "bitz=3",
                           "--out", tmp_path / "q.onnx")
    assert_user_error(code, err, "bitz")


def test_missing_model_file_is_a_user_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "bench", tmp_path / "nope.onnx")
    assert_user_error(code, err, "does not exist")


def test_corrupt_model_file_is_a_user_error(capsys, onnx_file, tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(onnx_file.read_bytes()[: len(onnx_file.read_bytes()) // 2])  # a truncated copy
    code, _, err = run_cli(capsys, "quantize", bad, "--pass", "int4-weight-only", "--out", tmp_path / "q.onnx")
    assert_user_error(code, err, "not a valid ONNX model")
    assert not (tmp_path / "q.onnx").exists()


@pytest.mark.parametrize("data,needle", [
    (np.full((8, 64), np.nan, np.float32), "NaN"),
    (np.zeros((0, 64), np.float32), "no samples"),
    (np.array([[np.inf] * 64] * 4, np.float32), "infinite"),
])
def test_bad_calibration_data_is_a_user_error(capsys, onnx_file, tmp_path, data, needle):
    cal = tmp_path / "cal.npy"
    np.save(cal, data)
    code, _, err = run_cli(capsys, "quantize", onnx_file, "--pass", "int8-qdq", "--calibration-data", cal,
                           "--out", tmp_path / "q.onnx")
    assert_user_error(code, err, needle)
    assert not (tmp_path / "q.onnx").exists()


def test_wrong_input_shape_is_a_user_error(capsys, onnx_file):
    code, _, err = run_cli(capsys, "bench", onnx_file, "--input-shape", "63", "--reps", "5")
    assert_user_error(code, err, "63")


def test_existing_output_is_not_overwritten_without_force(capsys, onnx_file, tmp_path):
    out = tmp_path / "q.onnx"
    out.write_text("the user's precious file")
    code, _, err = run_cli(capsys, "quantize", onnx_file, "--pass", "int4-weight-only", "--out", out)
    assert_user_error(code, err, "already exists", "--force")
    assert out.read_text() == "the user's precious file"
    code, out_text, _ = run_cli(capsys, "quantize", onnx_file, "--pass", "int4-weight-only", "--out", out, "--force")
    assert code == 0 and out.stat().st_size > 1000


def test_quantize_onnx_file_writes_model_and_report(capsys, onnx_file, tmp_path):
    cal = tmp_path / "cal.npy"
    np.save(cal, np.random.default_rng(0).random((32, 64), dtype=np.float32))
    code, out, _ = run_cli(capsys, "quantize", onnx_file, "--pass", "int8-qdq", "--calibration-data", cal,
                           "--option", "calibration=percentile", "--out", tmp_path / "q.onnx", "--quiet")
    assert code == 0, out
    report = json.loads((tmp_path / "q.onnx.report.json").read_text())
    assert report["passes"][-1]["config"]["calibration"] == "percentile"
    assert report["passes"][-1]["bits_per_weight"] > 8


def test_bad_recipe_key_is_a_user_error(capsys, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('model = "digits-mlp"\ntarget = "host-cpu"\n[plan]\ncalibrate = "minmax"\n')
    code, _, err = run_cli(capsys, "deploy", "--recipe", recipe, "--out", tmp_path / "r")
    assert_user_error(code, err, "calibrate")


def test_invalid_recipe_toml_is_a_user_error(capsys, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text("model = \n")
    code, _, err = run_cli(capsys, "deploy", "--recipe", recipe)
    assert_user_error(code, err, "not valid TOML")


def test_a_user_error_in_a_real_process_prints_no_traceback(tmp_path):
    # the installed console script, as a user runs it: exit status and stderr are the contract
    proc = subprocess.run([sys.executable, "-m", "edgesmith.bench.cli", "deploy", "digits-mlp", "--target", "nope",
                           "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "unknown target 'nope'" in proc.stderr


def test_static_int8_of_an_onnx_file_without_calibration_data_says_how_to_give_it(capsys, onnx_file, tmp_path):
    code, _, err = run_cli(capsys, "quantize", onnx_file, "--pass", "int8-qdq", "--out", tmp_path / "q.onnx")
    assert_user_error(code, err, "--calibration-data")
    assert not (tmp_path / "q.onnx").exists()


def test_prune_of_a_producer_model_exports_the_pruned_model_to_onnx(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "quantize", "digits-mlp", "--pass", "prune-magnitude", "--option", "sparsity=0.5",
                           "--out", tmp_path / "p.onnx", "--quiet")
    assert code == 0, out
    import onnx
    from onnx import numpy_helper

    weights = [numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "p.onnx")).graph.initializer if t.dims and len(t.dims) == 2]
    zeros = sum(int((w == 0).sum()) for w in weights) / sum(w.size for w in weights)
    assert 0.49 < zeros < 0.51


def test_key_value_options_parse_as_json_values_or_text():
    from edgesmith.bench.recipe import parse_key_values

    assert parse_key_values(["tiny=true", "width=0.5", "n=3", "name=abc", "bits=[3,4]"], "--option") == {
        "tiny": True, "width": 0.5, "n": 3, "name": "abc", "bits": [3, 4]}


def test_model_option_without_equals_is_a_user_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", "--out", tmp_path / "o",
                           "--model-option", "tiny")
    assert_user_error(code, err, "KEY=VALUE")
    assert not (tmp_path / "o").exists()


def test_recipe_model_options_reach_the_producer(capsys, tmp_path):
    # an option digits-mlp does not take proves the [model_options] table was passed through, not dropped
    recipe = tmp_path / "r.toml"
    recipe.write_text('model = "digits-mlp"\ntarget = "host-cpu"\n[model_options]\nno_such = 1\n')
    code, _, err = run_cli(capsys, "deploy", "--recipe", recipe, "--out", tmp_path / "r")
    assert_user_error(code, err, "does not take the option(s)", "no_such")


def test_a_variant_the_model_rules_out_is_printed_and_heads_the_report(capsys, tmp_path):
    # an ONNX file without calibration data gets no int8 on the Jetson: the user must see it at once, not find a
    # note at the end of the page
    from edgesmith.bench.fuzz import matmul_onnx

    model = matmul_onnx(tmp_path / "m.onnx", 64, 10)
    code, out, _ = run_cli(capsys, "deploy", model, "--target", "jetson-orin-nano", "--input-shape", "64",
                           "--out", tmp_path / "r", "--quiet")
    assert code == 0
    assert "not built: int8: no calibration data was given" in out and "--calibration-data" in out
    head = (tmp_path / "r" / "report.md").read_text().splitlines()[:8]
    assert any(line.startswith("- **not built: int8**") for line in head)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert set(report["plan"]["not_built"]) == {"int8"} and [r["variant"] for r in report["results"]] == ["fp32", "fp16"]
