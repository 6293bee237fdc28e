"""The main job: `edgesmith demo` runs a recipe's deploys through the one pipeline and summarises them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from edgesmith.bench.cli import main
from edgesmith.bench.demo import DEMO_RECIPE
from edgesmith.bench.recipe import load_recipe, merged
from edgesmith.hardware import PlanOptions, get_target
from edgesmith.models import get_producer
from edgesmith.models.kinds import kind_names


def test_the_shipped_demo_recipe_covers_every_kind_on_every_target_that_runs_it():
    recipe = load_recipe(str(DEMO_RECIPE))
    pairs = set()
    for entry in recipe["deploy"]:
        d = merged(recipe, entry)
        producer = get_producer(d["model"], **d.get("model_options", {}))
        # the plan is made without building: the recipe's options must be valid for the model's kind
        get_target(d["target"]).plan(producer, PlanOptions(options=d.get("options", {}), **d.get("plan", {})))
        pairs.add((producer.kind, d["target"]))
    kinds = {k for k, _ in pairs}
    assert kinds == set(kind_names())
    for kind in kinds:
        runs_it = {t for t in ("host-cpu", "jetson-orin-nano", "loihi2") if kind in get_target(t).kinds}
        assert {t for k, t in pairs if k == kind} <= runs_it


@pytest.mark.lava
@pytest.mark.slow
def test_demo_writes_a_report_per_deploy_and_a_summary(tmp_path, capsys, digits):
    # the loihi2 entry scores 48 test digits given as the user's data: all 360 in Lava take a minute and a half,
    # and test_deploy's loihi2 test already runs them
    x, y = digits.test_data()
    np.save(tmp_path / "x.npy", x[:48]), np.save(tmp_path / "y.npy", y[:48])
    recipe = tmp_path / "demo.toml"
    recipe.write_text('[bench]\nwarmup = 1\nreps = 5\n'
                      '[[deploy]]\nmodel = "digits-mlp"\ntarget = "host-cpu"\nplan = { tvm = true }\n'
                      '[[deploy]]\nmodel = "digits-mlp"\ntarget = "loihi2"\n'
                      f'eval_data = "{tmp_path / "x.npy"}"\nlabels = "{tmp_path / "y.npy"}"\n'
                      '[[deploy]]\nmodel = "gbrl-cartpole"\ntarget = "host-cpu"\n'
                      'model_options = { steps = 2048, cache = false }\n')
    out = tmp_path / "demo"
    assert main(["demo", "--recipe", str(recipe), "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["model"], s["target"], s["kind"]) for s in summary] == [
        ("digits-mlp", "host-cpu", "tensor"), ("digits-mlp", "loihi2", "tensor"),
        ("gbrl-cartpole", "host-cpu", "tree-policy")]
    for s in summary:
        folder = out / f"{s['model']}-{s['target']}"
        assert (folder / "report.md").is_file() and s["rows"]
    loihi = json.loads((out / "digits-mlp-loihi2" / "report.json").read_text())
    assert loihi["results"][0]["bit_exact_reference"]["n_samples"] == 48
    host = summary[0]
    assert {"onnxruntime", "tvm (untuned)"} <= {r["runtime"] for r in host["rows"]}
    md = (out / "summary.md").read_text()
    assert "int8 / fp32 p50 latency ratio" in md and "decisions/s" in md
    # each section says which model size and how much data: a small model never reads as the full one
    assert "## gbrl-cartpole [steps=2048, cache=false] (tree-policy) on host-cpu" in md and " on 48 samples." in md
    # a second run must not silently replace the first
    assert main(["demo", "--recipe", str(recipe), "--quiet", "--out", str(out)]) == 2


def test_a_demo_recipe_with_a_bad_entry_fails_before_any_deploy(tmp_path, capsys):
    recipe = tmp_path / "demo.toml"
    recipe.write_text('[[deploy]]\nmodel = "digits-mlp"\ntarget = "host-cpu"\n'
                      '[[deploy]]\nmodel = "digits-mlp"\ntarget = "host-cpu"\n[deploy.bench]\nreps = "many"\n')
    assert main(["demo", "--recipe", str(recipe), "--quiet", "--out", str(tmp_path / "d")]) == 2
    assert "reps" in capsys.readouterr().err and not (tmp_path / "d").exists()
