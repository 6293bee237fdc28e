"""Every model kind through the one `edgesmith deploy`: the same report shape, the kind's own figures,
and a clear refusal (before any training) where a target does not run a kind."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from cli_helpers import assert_user_error, run_cli

FAST = ("--reps", "5", "--warmup", "1", "--quiet")
ROW_KEYS = {"variant", "runtime", "runtime_label", "evaluation", "size_bytes", "bits_per_weight", "max_abs_diff",
            "latency", "speed", "energy", "workload"}


def _deploy(capsys, tmp_path, *argv) -> dict:
    out = tmp_path / "report"
    code, _, err = run_cli(capsys, "deploy", *argv, "--out", out, *FAST)
    assert code == 0, err
    assert (out / "report.md").exists() and any(out.glob("*.png"))
    report = json.loads((out / "report.json").read_text())
    for row in report["results"]:
        assert ROW_KEYS <= set(row)
        for b in report["batch_sizes"]:
            assert row["latency"][str(b)]["provenance"] in ("measured", "estimated")
            assert row["speed"][str(b)]["provenance"] == row["latency"][str(b)]["provenance"]
        assert row["energy"]["provenance"] in ("measured", "estimated")
        assert row["energy"]["per"] == report["unit"]
    return report


def test_token_lm_deploys_step_graphs_with_perplexity_and_decode_speed(capsys, tmp_path):
    r = _deploy(capsys, tmp_path, "rwkv7-ref", "--target", "host-cpu", "--option", 'methods=["rwkv-rtn"]',
                "--option", "bits=[4]")
    assert r["kind"]["name"] == "token-lm" and r["unit"] == "token" and r["batch_sizes"] == [1]
    rows = {x["variant"]: x for x in r["results"]}
    assert set(rows) == {"fp32", "rtn-4bit"}
    ref = r["reference"]["evaluation"]["value"]
    # the fp32 step graph, fed token by token with its state carried, scores what the torch model scores
    assert rows["fp32"]["evaluation"]["value"] == pytest.approx(ref, rel=1e-5)
    assert ref < rows["rtn-4bit"]["evaluation"]["value"] < 1.05 * ref
    assert rows["rtn-4bit"]["size_bytes"] < 0.5 * rows["fp32"]["size_bytes"]
    speed = rows["rtn-4bit"]["speed"]["1"]
    assert speed["unit"] == "tokens/s" and speed["value"] == pytest.approx(1 / rows["rtn-4bit"]["latency"]["1"]["p50"])
    export = rows["rtn-4bit"]
    notes = [n for v in r["variants"] if v["name"] == "rtn-4bit" for p in v["pass_reports"] for n in p["notes"]]
    assert any("12 linear(s) as MatMulNBits" in n for n in notes), notes  # 2 layers x 6 block linears
    assert export["latency"]["1"]["provenance"] == "measured"


def test_tree_policy_deploys_engine_onnx_and_compiled_c_rows(capsys, tmp_path):
    r = _deploy(capsys, tmp_path, "gbrl-cartpole", "--target", "host-cpu", "--model-option", "steps=2048",
                "--model-option", "cache=false", "--batch", "1")
    assert r["kind"]["name"] == "tree-policy" and r["reference"]["runtime"] == "trees"
    rows = {x["variant"]: x for x in r["results"]}
    assert set(rows) == {"trees", "onnx", "c"}
    assert rows["c"]["runtime"] == "c" and rows["c"]["latency"]["1"]["provenance"] == "measured"
    for row in rows.values():  # the same policy in three forms: same return, outputs within float rounding
        assert row["evaluation"]["value"] == r["reference"]["evaluation"]["value"]
        assert row["max_abs_diff"] < 1e-4


def test_stream_deploys_to_loihi2_with_lava_bit_exact_against_numba(capsys, tmp_path):
    # one clip of 0.25 s (eval_clips, eval_clip_s): Lava's simulation is most of the time, the check the same
    r = _deploy(capsys, tmp_path, "lrnn-denoiser", "--target", "loihi2", "--model-option", "tiny=true",
                "--model-option", "eval_clips=1", "--model-option", "eval_clip_s=0.25",
                "--option", "prune_epochs=1", "--option", "qat_epochs=1")
    assert r["kind"]["name"] == "stream" and r["unit"] == "clip"
    (row,) = r["results"]
    assert row["variant"] == "sparse-fixed" and row["runtime"] == "lava-lrnn"
    assert row["bit_exact_reference"]["max_abs_diff"] == 0 and row["bit_exact_reference"]["activity_equal"]
    assert row["activity"]["synops"] > 0 and row["latency"]["1"]["provenance"] == "estimated"
    assert row["speed"]["1"]["name"] == "real_time_factor" and 0 < row["speed"]["1"]["value"] < 1


def test_stream_on_jetson_counts_one_launch_per_layer_and_frame(capsys, tmp_path):
    r = _deploy(capsys, tmp_path, "lrnn-denoiser", "--target", "jetson-orin-nano", "--model-option", "tiny=true")
    (row,) = r["results"]
    frames = row["workload"]["timesteps"]
    assert frames > 1 and row["latency"]["1"]["breakdown"]["launch_s"] == pytest.approx(
        frames * row["workload"]["n_layers"] * 5e-6)


@pytest.mark.parametrize("model,target,kind", [("gbrl-cartpole", "loihi2", "tree-policy"),
                                               ("rwkv7-ref", "loihi2", "token-lm"),
                                               ("gbrl-cartpole", "jetson-orin-nano", "tree-policy")])
def test_a_kind_the_target_cannot_run_is_refused_before_any_work(capsys, tmp_path, model, target, kind):
    t0 = time.perf_counter()
    code, _, err = run_cli(capsys, "deploy", model, "--target", target, "--out", tmp_path / "r")
    assert_user_error(code, err, f"{target} cannot run {model}, a {kind} model", "deploy it to host-cpu")
    assert time.perf_counter() - t0 < 10  # refused before building (the GBRL policy trains for minutes)
    assert not (tmp_path / "r").exists()


def test_an_option_of_another_kind_is_refused_naming_the_valid_ones(capsys, tmp_path):
    code, _, err = run_cli(capsys, "deploy", "rwkv7-ref", "--target", "host-cpu", "--option", "prune_sparsity=0.5",
                           "--out", tmp_path / "r")
    assert_user_error(code, err, "token-lm", "prune_sparsity", "methods")


def test_quantize_of_a_token_lm_writes_its_step_graph_and_scores_the_file(capsys, tmp_path):
    out = tmp_path / "q.onnx"
    code, stdout, err = run_cli(capsys, "quantize", "rwkv7-ref", "--pass", "rwkv-rtn", "--option", "bits=4",
                                "--n-calibration", "4", "--out", out, "--quiet")
    assert code == 0, err
    report = json.loads((tmp_path / "q.onnx.report.json").read_text())
    assert [p["config"]["kind"] for p in report["passes"]] == ["rwkv-rtn", "export-step-onnx"]
    assert report["passes"][0]["bits_per_weight"] == pytest.approx(4 + 20 / 64)
    assert "perplexity of the written file" in stdout

    import onnx

    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert sum(n.op_type == "MatMulNBits" for n in onnx.load(str(out)).graph.node) == 12


def test_export_writes_each_kind_with_its_own_export_pass(capsys, tmp_path):
    code, stdout, err = run_cli(capsys, "export", "gbrl-cartpole", "--model-option", "steps=2048",
                                "--model-option", "cache=false", "--out", tmp_path / "p.onnx")
    assert code == 0, err and "export-tree-onnx" in stdout
    import onnxruntime as ort

    sess = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: np.zeros((3, 4), np.float32)})[0]
    assert out.shape == (3, 2)


@pytest.mark.parametrize("flag,value,named", [("--option", "sq_percentile=0", "sq_percentile"),
                                              ("--option", "quantize_vectors=1", "quantize_vectors"),
                                              ("--model-option", "eval_sequences=0", "eval_sequences")])
def test_bad_token_lm_settings_are_refused_before_any_output(capsys, tmp_path, flag, value, named):
    code, _, err = run_cli(capsys, "deploy", "rwkv7-ref", "--target", "host-cpu", flag, value, "--out", tmp_path / "r")
    assert_user_error(code, err, named)
    assert not (tmp_path / "r").exists()
