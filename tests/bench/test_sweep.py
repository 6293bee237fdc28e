"""`edgesmith sweep`: recipe checks, content-hash cell keys, Pareto fronts, a local run, a killed run resumed,
and the same cells as Ray tasks on a local Ray instance."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgesmith.bench.sweep import cell_key, load_sweep, pareto_front, run_sweep
from edgesmith.common import EdgesmithError
from cli_helpers import assert_user_error, run_cli

# digits-mlp fp32 in onnxruntime, timed briefly: a cell costs seconds, most of it the worker's imports
FAST = """model = "digits-mlp"
target = "host-cpu"
[plan]
tvm = false
variants = ["fp32"]
[bench]
warmup = 1
reps = 5
batch_sizes = [1]
"""


def _recipe(tmp_path: Path, body: str, name: str = "sweep.toml") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def test_a_grid_and_a_cell_list_cross_into_one_deploy_table_per_cell(tmp_path):
    p = _recipe(tmp_path, FAST + "[grid]\nseed = [0, 1]\n[grid.options]\ncalibration = [\"minmax\", \"percentile\"]\n"
                "[[cell]]\ntarget = \"host-cpu\"\n[[cell]]\ntarget = \"jetson-orin-nano\"\n")
    _, cells = load_sweep(p)
    assert len(cells) == 8
    assert {(c.spec["target"], c.spec["seed"], c.spec["options"]["calibration"]) for c in cells} == {
        (t, s, cal) for t in ("host-cpu", "jetson-orin-nano") for s in (0, 1) for cal in ("minmax", "percentile")}
    assert all(c.spec["plan"] == {"tvm": False, "variants": ["fp32"]} for c in cells)  # the top level is shared
    assert len({c.key for c in cells}) == 8


@pytest.mark.parametrize("body, needle", [
    (FAST + "[sweep]\nparallel = 3\n", "unknown [sweep] key"),
    (FAST + "[grid]\nseed = []\n", "not a non-empty list"),
    (FAST + "[grid]\nseed = 3\n", "not a non-empty list"),
    (FAST.replace('model = "digits-mlp"\n', "") + "[grid]\nseed = [0]\n", "no model"),
    (FAST + "[grid.bench]\nreps = [\"many\"]\n", "reps"),
    (FAST + "[grid]\nseed = [0, 0]\n", "two cells deploy the same thing"),
    (FAST + "[grid.options]\nno_such_option = [1]\n", "no_such_option"),
    # a deploy recipe's [[deploy]] list was skipped without a word, the sweep running only the top level
    (FAST + '[[deploy]]\nmodel = "digits-wide"\n', "a sweep does not run them"),
    (FAST + '[[cell]]\nseed = 1\n[[cell.deploy]]\nmodel = "digits-wide"\n', "a sweep does not run them"),
])
def test_a_bad_sweep_recipe_is_one_clear_error_before_any_cell_runs(tmp_path, capsys, body, needle):
    code, _, err = run_cli(capsys, "sweep", _recipe(tmp_path, body), "--out", tmp_path / "out")
    assert_user_error(code, err, needle)
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_a_sweep_is_never_written_into(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _, err = run_cli(capsys, "sweep", _recipe(tmp_path, FAST), "--out", mine)
    assert_user_error(code, err, "not a sweep folder")
    assert sorted(q.name for q in mine.iterdir()) == ["notes.txt"]


def test_a_cell_key_follows_the_bytes_of_the_files_it_names_and_its_options(tmp_path):
    data = tmp_path / "calib.npy"
    data.write_bytes(b"one")
    spec = {"model": "digits-mlp", "target": "host-cpu", "calibration_data": str(data)}
    k1 = cell_key(spec)
    assert cell_key(dict(spec)) == k1  # stable
    data.write_bytes(b"two")
    k2 = cell_key(spec)
    assert k2 != k1  # same path, new contents: not the same cell
    assert cell_key({**spec, "options": {"calibration": "percentile"}}) != k2


def test_a_cell_key_follows_the_weights_a_named_producer_loads(tmp_path, monkeypatch):
    # the large RWKV references are retrained in place under the same name (GPU or CPU runs): cells scored on
    # the old weights must not be reused for the new ones
    import edgesmith.models.rwkv.producer as rwkv_producer

    weights = tmp_path / "rwkv7-ref-large.pth"
    monkeypatch.setattr(rwkv_producer, "reference_paths",
                        lambda version, size="small": (weights, weights.with_suffix(".json")))
    spec = {"model": "rwkv7-ref", "target": "host-cpu", "model_options": {"size": "large"}}
    weights.write_bytes(b"trained 300 steps")
    k1 = cell_key(spec)
    weights.write_bytes(b"trained 1400 steps")
    assert cell_key(spec) != k1
    assert cell_key({**spec, "model_options": {"size": "no-such-size"}})  # refused options: the deploy says so


def _row(value, size, higher=True, **kw):
    return {"value": value, "size_bytes": size, "higher_is_better": higher, **kw}


def test_the_pareto_front_keeps_rows_no_other_row_beats_in_the_metric_direction():
    rows = [_row(0.90, 10), _row(0.95, 20), _row(0.93, 30), _row(0.99, 40), _row(0.99, 50)]
    assert [r["size_bytes"] for r in pareto_front(rows, "size_bytes")] == [10, 20, 40]
    lower = [_row(3.0, 10, False), _row(2.0, 20, False), _row(2.5, 30, False)]  # perplexity: lower is better
    assert [r["size_bytes"] for r in pareto_front(lower, "size_bytes")] == [10, 20]


@pytest.mark.slow
def test_a_local_sweep_runs_every_cell_then_a_rerun_runs_only_what_is_missing(tmp_path):
    p = _recipe(tmp_path, FAST + "[grid]\nseed = [0, 1]\n")
    out = tmp_path / "out"
    first = run_sweep(p, out, workers=2, progress=False, log=lambda m: None)
    assert (first["run"]["ran"], first["run"]["cached"], first["run"]["failed"]) == (2, 0, 0)
    assert len(first["rows"]) == 2 and {r["variant"] for r in first["rows"]} == {"fp32"}
    assert all(r["latency_provenance"] == "measured" and r["energy_provenance"] for r in first["rows"])
    assert {f["cost"] for f in first["fronts"]} == {"size_bytes", "latency_s", "energy_j"}
    for name in ("sweep.json", "sweep.md", "pareto.png"):
        assert (out / name).stat().st_size > 0
    pids = {json.loads(c.read_text())["pid"] for c in out.glob("cells/*/cell.json")}
    assert len(pids) == 2  # two worker processes, one cell each

    again = run_sweep(p, out, workers=2, progress=False, log=lambda m: None)
    assert (again["run"]["ran"], again["run"]["cached"]) == (0, 2)
    assert again["rows"] == first["rows"]  # cached cells come back as they were measured

    victim = next(out.glob("cells/*/cell.json"))
    victim.unlink()
    third = run_sweep(p, out, workers=2, progress=False, log=lambda m: None)
    assert (third["run"]["ran"], third["run"]["cached"]) == (1, 1)


def _ray_processes() -> set[int]:
    """Pids of this user's Ray daemons (GCS, raylet, workers)."""
    out = subprocess.run(["pgrep", "-u", str(os.getuid()), "-f", "raylet|gcs_server|ray::"], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["local", "ray"])
def test_a_sweep_killed_halfway_resumes_with_only_the_missing_cells(tmp_path, runner):
    if runner == "ray":
        pytest.importorskip("ray", reason="ray is a declared dependency; make setup installs it")
    p = _recipe(tmp_path, FAST + "[grid]\nseed = [0, 1, 2, 3]\n[sweep]\nthreads_per_cell = 1\n")
    out = tmp_path / "out"
    how = ["--workers", "1"] if runner == "local" else ["--ray", "local"]  # ray: the CLI starts its own instance
    before = _ray_processes()
    cmd = [sys.executable, "-m", "edgesmith.bench.cli", "sweep", str(p), "--out", str(out), *how, "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not list(out.glob("cells/*/cell.json")):
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.time() < deadline, "no cell finished in 5 minutes"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its children at once: no clean-up code runs
        proc.wait()
    done_before = len(list(out.glob("cells/*/cell.json")))
    assert 1 <= done_before < 4
    assert not (out / "sweep.json").exists()  # the merged report is written at the end only
    if runner == "ray":  # the killed driver's Ray instance went with it (Ray's daemons share its fate)
        deadline = time.time() + 60
        while _ray_processes() - before and time.time() < deadline:
            time.sleep(0.5)
        assert not _ray_processes() - before, "Ray processes of the killed sweep are still running"
    resumed = run_sweep(p, out, workers=2, ray="local" if runner == "ray" else None, progress=False,
                        log=lambda m: None)
    assert resumed["run"]["cached"] == done_before
    assert resumed["run"]["ran"] == 4 - done_before and resumed["run"]["failed"] == 0
    assert [c["status"] for c in resumed["cells"]] == ["done"] * 4


@pytest.mark.slow
def test_the_same_cells_run_as_ray_tasks_on_a_local_ray_instance_and_resume(tmp_path):
    ray = pytest.importorskip("ray", reason="ray is a declared dependency; make setup installs it")
    p = _recipe(tmp_path, FAST + "[grid]\nseed = [0, 1, 2]\n[sweep]\nthreads_per_cell = 1\n")
    out = tmp_path / "out"
    _, cells = load_sweep(p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        first = run_sweep(p, out, ray="local", progress=False, log=lambda m: None)
        assert (first["run"]["ran"], first["run"]["failed"]) == (3, 0)
        records = [json.loads(c.read_text()) for c in out.glob("cells/*/cell.json")]
        assert {r["runner"] for r in records} == {"ray"} and all(r["ray_node"] for r in records)
        assert {r["pid"] for r in records} != {os.getpid()}  # ran in Ray's workers, not in this process
        for c in out.glob("cells/*"):  # the task's report came back and was written here
            assert json.loads((c / "deploy" / "report.json").read_text())["model"] == "digits-mlp"
        # a cell lost (as when a cluster dies mid-sweep): only it runs again
        next(out.glob("cells/*/cell.json")).unlink()
        again = run_sweep(p, out, ray="local", progress=False, log=lambda m: None)
        assert (again["run"]["ran"], again["run"]["cached"]) == (1, 2)
    finally:
        ray.shutdown()


def test_a_cell_that_fails_is_reported_and_retried_on_the_next_run_the_others_kept(tmp_path, monkeypatch):
    from edgesmith.bench import sweep as sw

    p = _recipe(tmp_path, FAST + "[grid]\nseed = [0, 1]\n")
    _, cells = load_sweep(p)

    def fake_local(todo, out, workers, threads, _ray, force=False):  # no processes: the driver's bookkeeping is what is tested
        for c in todo:
            if c.spec["seed"] == 1:
                yield c, None, "the model file is damaged (fix it)"
            else:
                yield c, {"summary": {"model": "m", "target": "host-cpu", "reference": {"metric": "accuracy",
                                      "higher_is_better": True}, "rows": []},
                          "wall_s": 1.0, "host": "h", "pid": 1, "report_md": "# r\n",
                          "report": {"model": "m"}}, None
    monkeypatch.setattr(sw, "_run_local", fake_local)
    report = run_sweep(p, tmp_path / "out", workers=1, progress=False, log=lambda m: None)
    assert [c["status"] for c in report["cells"]] == ["done", "failed"]
    assert "damaged" in report["cells"][1]["error"]
    again = run_sweep(p, tmp_path / "out", workers=1, progress=False, log=lambda m: None)
    assert (again["run"]["cached"], again["run"]["ran"] + again["run"]["failed"]) == (1, 1)
    with pytest.raises(EdgesmithError, match="not a sweep folder"):
        run_sweep(p, tmp_path, workers=1, progress=False, log=lambda m: None)


def test_a_cell_that_sets_a_grid_key_itself_is_not_crossed_with_that_axis(tmp_path):
    # the routers of the scaling recipe: a [[cell]] naming its own target runs on that target only
    p = _recipe(tmp_path, FAST + '[grid]\ntarget = ["host-cpu", "jetson-orin-nano"]\n[[cell]]\nseed = 0\n'
                '[[cell]]\nseed = 1\ntarget = "host-cpu"\n')
    _, cells = load_sweep(p)
    assert sorted((c.spec["seed"], c.spec["target"]) for c in cells) == [
        (0, "host-cpu"), (0, "jetson-orin-nano"), (1, "host-cpu")]


def test_the_shipped_sweep_recipes_load_and_check(tmp_path):
    from edgesmith.bench.sweep import RECIPES

    counts = {p.stem: len(load_sweep(p)[1]) for p in sorted(RECIPES.glob("*.toml"))}
    assert counts == {"lrnn-width-sparsity": 12, "lrnn-width-sparsity-quick": 9, "rwkv-quant": 16,
                      "rwkv-quant-seeds": 42, "rwkv-quant-seeds-vqnorm": 42, "rwkv-quant-seeds-vqnorm-val": 78,
                      "rwkv-quant-seeds-small": 126,
                      "rwkv-quant-seeds-small-oracle": 66, "rwkv-quant-seeds-small-oracle-plainvq": 66, "rwkv-quant-table": 56,
                      "rwkv-quant-table-quick": 3,
                      "scaling": 19, "scaling-quick": 5}


def test_the_cells_of_one_recipe_hash_a_shared_file_once(tmp_path, monkeypatch):
    import edgesmith.bench.sweep as sweep

    data = tmp_path / "calib.npy"
    data.write_bytes(b"shared")
    calls = []
    real = sweep._fingerprint
    monkeypatch.setattr(sweep, "_fingerprint", lambda p: calls.append(p) or real(p))
    specs = [{"model": "digits-mlp", "target": "host-cpu", "calibration_data": str(data), "seed": s} for s in range(3)]
    hashed: dict = {}
    keys = [cell_key(s, hashed) for s in specs]
    assert len(calls) == 1 and len(set(keys)) == 3
    assert keys == [cell_key(s) for s in specs]  # the same keys as hashing every time
