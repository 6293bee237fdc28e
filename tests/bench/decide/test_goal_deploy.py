"""Goal-driven deploys end to end: the budget checked on one part of the evaluation data and the choice reported
on the other, layers restored where int8 misses, the artifact written to chosen/, bad goals refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import assert_user_error, run_cli
from edgesmith.compress import Artifact
from edgesmith.models.base import split_indices
from edgesmith.runtimes import get_runtime

FAST = ("--reps", "5", "--warmup", "1", "--quiet", "--batch", "1")


def _decision(out: Path) -> dict:
    return json.loads((out / "decision.json").read_text())


def test_split_indices_are_disjoint_cover_every_sample_and_follow_the_seed():
    val, held = split_indices(10, 0.3, seed=0)
    assert len(val) == 3 and len(held) == 7 and not set(val) & set(held) and set(val) | set(held) == set(range(10))
    assert np.array_equal(split_indices(10, 0.3, seed=0)[0], val)
    assert not np.array_equal(split_indices(10, 0.3, seed=1)[0], val)
    assert split_indices(1, 0.5, seed=0) is None


def test_a_goal_chooses_within_budget_and_reports_the_choice_on_held_out_data(capsys, tmp_path):
    out = tmp_path / "r"
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", "--max-drop", "2%",
                           "--out", out, *FAST)
    assert code == 0, err
    d = _decision(out)
    report = json.loads((out / "report.json").read_text())
    for row in report["results"]:  # every row scored on both parts, which together are the whole evaluation
        s = row["evaluation_split"]
        assert s["validation"]["n_samples"] + s["held_out"]["n_samples"] == row["evaluation"]["n_samples"]
    chosen = d["chosen"]
    assert chosen["verdict"].startswith("chosen")
    assert chosen["validation"] >= d["reference"]["validation"] * 0.98 - 1e-9
    assert {c["variant"] for c in d["candidates"]} >= {"fp32", "int8", "int4"}
    assert all(c["verdict"] for c in d["candidates"])
    assert d["paired_timing"] and "round-robin" in d["paired_timing"]["method"]
    # 180 validation samples cannot resolve a 2% drop of 0.97 (one standard error is 1.2 points): said, not hidden
    assert any("do not resolve a drop" in w for w in d["warnings"])
    # the chosen file is there to ship, and runs
    meta = json.loads((out / "chosen" / "chosen.json").read_text())
    assert meta["variant"] == chosen["variant"] and meta["passes"] and meta["why"] == chosen["verdict"]
    art = Artifact("onnx", path=out / "chosen" / meta["files"][0])
    assert get_runtime("onnxruntime").load(art).run(np.zeros((2, 64), np.float32)).outputs.shape == (2, 10)
    assert "> **decision**: chose" in (out / "report.md").read_text()
    assert (out / "decision.png").stat().st_size > 0 and "| verdict |" in (out / "decision.md").read_text()


def _outlier_mlp(path: Path) -> None:
    """A 5-layer MLP whose layer 1 makes one activation channel 1000x the others (layer 2 undoes it: the same
    function), so int8 of the layers around that channel loses everything and the others cost little."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    dims, nodes, inits, x = [32, 64, 64, 64, 64, 16], [], [], "input"
    for i in range(5):
        w = (rng.standard_normal((dims[i], dims[i + 1])) / np.sqrt(dims[i])).astype(np.float32)
        if i == 1:
            w[:, 0] *= 1000.0
        if i == 2:
            w[0, :] /= 1000.0
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(dims[i + 1], np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"/l{i}/MatMul"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"/l{i}/Add")]
        x = f"a{i}"
        if i < 4:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"/l{i}/Relu"))
            x = f"r{i}"
    graph = helper.make_graph(nodes, "outlier", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 32])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    np.save(path.parent / "cal.npy", rng.standard_normal((64, 32)).astype(np.float32))
    np.save(path.parent / "ev.npy", rng.standard_normal((64, 32)).astype(np.float32))


def _outlier_floor_deploy(capsys, tmp_path: Path, variant: str, floor: float, out: Path) -> dict:
    """Deploy the outlier MLP as fp32 and ``variant`` under an output-SQNR floor, by size; its decision."""
    _outlier_mlp(tmp_path / "mlp.onnx")
    code, _, err = run_cli(capsys, "deploy", tmp_path / "mlp.onnx", "--target", "host-cpu", "--calibration-data",
                           tmp_path / "cal.npy", "--eval-data", tmp_path / "ev.npy", "--min-sqnr", str(floor),
                           "--objective", "size", "--variant", "fp32", "--variant", variant, "--out", out, *FAST)
    assert code == 0, err
    return _decision(out)


def test_int8_that_misses_a_fidelity_floor_gets_its_most_harmful_layers_restored(capsys, tmp_path):
    # by size int8 can beat fp32, so the search runs (by latency it would stop at once: restoring layers cannot
    # make an int8 slower than fp32 any faster)
    out = tmp_path / "r"
    d = _outlier_floor_deploy(capsys, tmp_path, "int8", 25, out)
    int8 = next(c for c in d["candidates"] if c["variant"] == "int8")
    assert int8["validation"] < 25 and int8["verdict"].startswith("rejected: misses the budget")
    search = next(s for s in d["restore_search"] if s["variant"] == "int8")
    k = len(search["layers"])
    assert 1 <= k < 5 and search["result"] == f"int8-restored{k}"
    assert search["layers"][0] in ("/l1/MatMul", "/l2/MatMul")  # the ranking starts at the outlier channel
    assert search["probes"][0]["k"] == 5 and search["probes"][0]["within_budget"]  # first: every layer back
    assert all(p["within_budget"] == (p["k"] >= k) for p in search["probes"])  # the fewest that meet the floor
    restored = next(c for c in d["candidates"] if c["variant"] == search["result"])
    assert restored["restored"] == search["layers"] and restored["validation"] >= 25 and restored["cost"] < d[
        "candidates"][0]["cost"]
    report = json.loads((out / "report.json").read_text())
    assert any(r["variant"] == search["result"] for r in report["results"])
    kept = {v["name"] for v in report["variants"]}  # scored probes that were not kept leave no artifacts behind
    assert {p.name for p in (out / "artifacts").iterdir()} <= kept


@pytest.mark.parametrize("flags, needles", [
    (("--min-sqnr", "30"), ("--min-sqnr bounds output SQNR", "accuracy")),
    (("--objective", "size"), ("--objective size needs a budget",)),
    (("--max-drop", "one"), ("--max-drop 'one' is not a number",)),
])
def test_a_goal_this_deploy_cannot_read_is_one_error_before_any_work(capsys, tmp_path, flags, needles):
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", *flags, "--out", tmp_path / "r",
                           "--quiet")
    assert_user_error(code, err, *needles)
    assert not (tmp_path / "r").exists()


def test_a_recipe_s_goal_table_and_flags_make_one_goal(tmp_path):
    from edgesmith.bench.cli import build_parser
    from edgesmith.bench.recipe import check_deploy_table, deploy_options

    recipe = check_deploy_table({"goal": {"max_drop": "1%", "objective": "size"}}, "recipe")
    args = build_parser().parse_args(["deploy", "digits-mlp", "--target", "host-cpu", "--batch", "8"])
    goal = deploy_options(args, recipe).goal
    assert (goal.max_drop, goal.relative, goal.objective, goal.batch) == (0.01, True, "size", 8)
    args = build_parser().parse_args(["deploy", "digits-mlp", "--target", "host-cpu", "--min-sqnr", "25"])
    goal = deploy_options(args, recipe).goal
    assert goal.min_sqnr == 25 and goal.max_drop is None and goal.objective == "size"
    assert deploy_options(build_parser().parse_args(["deploy", "digits-mlp", "--target", "host-cpu"]), {}).goal is None


def test_a_sweep_varies_the_goal_per_cell(tmp_path):
    # each cell's deploy options are the ones run_cell deploys with: the goal of its own grid values
    import argparse

    from edgesmith.bench.recipe import deploy_options
    from edgesmith.bench.sweep import load_sweep

    (tmp_path / "r.toml").write_text(
        'model = "digits-mlp"\ntarget = "host-cpu"\n[goal]\nobjective = "size"\n'
        '[grid]\n"goal.max_drop" = ["1%", 0.05]\n')
    _, cells = load_sweep(tmp_path / "r.toml")
    goals = sorted((g.max_drop, g.relative, g.objective) for g in (
        deploy_options(argparse.Namespace(quiet=True), c.spec, {"out": "unused"}).goal for c in cells))
    assert goals == [(0.01, True, "size"), (0.05, False, "size")]


def test_allow_qat_trains_only_when_no_post_training_candidate_meets_the_budget(capsys, tmp_path):
    out = tmp_path / "r"
    # fp32 alone leaves no post-training candidate: QAT is built, judged like any row, and named as trained
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", "--max-drop", "1%", "--allow-qat",
                           "--variant", "fp32", "--out", out, *FAST)
    assert code == 0, err
    d = _decision(out)
    assert d["qat"]["outcome"] == "built qat-w8a8, qat-w4a8 (3 epochs each)"
    assert {c["variant"] for c in d["candidates"]} == {"fp32", "qat-w8a8", "qat-w4a8"}
    # a model file with no torch module and no training data: not tried, and why
    _outlier_mlp(tmp_path / "mlp.onnx")
    code, _, err = run_cli(capsys, "deploy", tmp_path / "mlp.onnx", "--target", "host-cpu", "--calibration-data",
                           tmp_path / "cal.npy", "--eval-data", tmp_path / "ev.npy", "--min-sqnr", "25", "--allow-qat",
                           "--variant", "fp32", "--out", tmp_path / "r2", *FAST)
    assert code == 0, err
    assert _decision(tmp_path / "r2")["qat"]["outcome"].startswith("not tried: the target's plan offers no QAT variant")


def test_int4_that_misses_a_floor_gets_layers_restored_too(capsys, tmp_path):
    # int4 ranks its layers like int8 (noise added across each), so the same search restores them
    d = _outlier_floor_deploy(capsys, tmp_path, "int4", 15, tmp_path / "r")
    search = next(s for s in d["restore_search"] if s["variant"] == "int4")
    k = len(search["layers"])
    assert 1 <= k < 5 and search["result"] == f"int4-restored{k}"
    restored = next(c for c in d["candidates"] if c["variant"] == search["result"])
    assert restored["validation"] >= 15 and restored["cost"] < d["candidates"][0]["cost"]
