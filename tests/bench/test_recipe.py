"""Recipes: relative input paths are read from the recipe's folder, so a recipe runs the same from any folder."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from edgesmith.bench.recipe import load_recipe
from edgesmith.bench.sweep import load_sweep
from cli_helpers import run_cli


def test_relative_input_paths_are_joined_to_the_recipes_folder_and_names_and_out_are_not(tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "r.toml").write_text(
        'model = "m.onnx"\ntarget = "host-cpu"\nout = "runs/x"\ncalibration_data = "data/c.npy"\n'
        f'eval_data = "{tmp_path / "abs.npy"}"\n'
        '[[deploy]]\nmodel = "net.py:make"\nlabels = "y.npy"\n[[deploy]]\nmodel = "digits-mlp"\n')
    r = load_recipe(str(folder / "r.toml"))
    assert r["model"] == str(folder / "m.onnx") and r["calibration_data"] == str(folder / "data" / "c.npy")
    assert r["eval_data"] == str(tmp_path / "abs.npy") and r["out"] == "runs/x"  # absolute kept; out from the cwd
    factory, producer = r["deploy"]
    assert factory["model"] == f"{folder / 'net.py'}:make" and factory["labels"] == str(folder / "y.npy")
    assert producer["model"] == "digits-mlp"


def test_a_deploy_recipe_beside_its_model_runs_from_another_folder(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "study"
    folder.mkdir()
    torch.manual_seed(0)
    torch.onnx.export(torch.nn.Linear(8, 3).eval(), (torch.randn(2, 8),), str(folder / "m.onnx"),
                      input_names=["x"], dynamic_axes={"x": {0: "b"}}, dynamo=False)
    np.save(folder / "x.npy", np.random.default_rng(0).normal(size=(32, 8)).astype(np.float32))
    (folder / "r.toml").write_text('model = "m.onnx"\ntarget = "host-cpu"\neval_data = "x.npy"\n'
                                   '[plan]\ntvm = false\nvariants = ["fp32"]\n[bench]\nwarmup = 1\nreps = 5\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # it once looked for m.onnx here: "does not exist"
    code, _, err = run_cli(capsys, "deploy", "--recipe", folder / "r.toml", "--out", "out", "--quiet")
    assert code == 0, err
    report = json.loads((elsewhere / "out" / "report.json").read_text())
    assert report["results"][0]["evaluation"]["n_samples"] == 32


def test_a_sweep_recipes_cells_read_their_model_file_from_the_recipes_folder(tmp_path, monkeypatch):
    folder = tmp_path / "study"
    folder.mkdir()
    torch.onnx.export(torch.nn.Linear(8, 3).eval(), (torch.randn(2, 8),), str(folder / "m.onnx"),
                      input_names=["x"], dynamic_axes={"x": {0: "b"}}, dynamo=False)
    (folder / "s.toml").write_text('target = "host-cpu"\n[grid]\nmodel = ["m.onnx", "digits-mlp"]\n')
    monkeypatch.chdir(tmp_path)
    _, cells = load_sweep(folder / "s.toml")
    assert sorted(c.spec["model"] for c in cells) == sorted([str((folder / "m.onnx").resolve()), "digits-mlp"])


def test_a_sweep_cells_input_paths_are_absolute_even_for_a_relative_recipe_path_and_a_factory(tmp_path, monkeypatch):
    folder, data = tmp_path / "study", tmp_path / "data"
    folder.mkdir()
    data.mkdir()
    (folder / "net.py").write_text("import torch\n\ndef make():\n    return torch.nn.Linear(8, 3)\n")
    np.save(data / "x.npy", np.zeros((4, 8), np.float32))
    (folder / "s.toml").write_text('target = "host-cpu"\neval_data = "../data/x.npy"\nlabels = "../data/none.npy"\n'
                                   '[grid]\nmodel = ["net.py:make"]\n')
    monkeypatch.chdir(tmp_path)  # a worker that starts elsewhere must still find the files: they are absolute
    _, (cell,) = load_sweep("study/s.toml")
    assert cell.spec["model"] == f"{(folder / 'net.py').resolve()}:make"
    assert cell.spec["eval_data"] == str((data / "x.npy").resolve())
    assert cell.spec["labels"] == str(Path("study") / ".." / "data" / "none.npy")  # a missing file: deploy names it
