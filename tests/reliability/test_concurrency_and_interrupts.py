"""Processes sharing a cache and an output path, interrupted deploys, and the same bytes for the same inputs."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ES = [sys.executable, "-m", "edgesmith.bench.cli"]
QUICK = ["--variant", "fp32", "--variant", "int8", "--no-tvm", "--reps", "5", "--warmup", "1", "--quiet",
         "--batch", "1"]

_WRITER = """
import sys
from edgesmith.common import EdgesmithError, atomic_path
path, n, force = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
errors = 0
for i in range(n):
    try:
        with atomic_path(path, force=force) as tmp:
            tmp.write_text(f"{i}\\n" * 100)
    except EdgesmithError:
        errors += 1
print(errors)
"""


def test_many_forced_writers_to_one_path_never_fail_and_never_leave_a_partial_file(tmp_path):
    target = tmp_path / "shared.txt"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(target), "300", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert [o.strip() for o, _ in outs] == ["0"] * 4
    lines = target.read_text().splitlines()
    assert len(lines) == 100 and len(set(lines)) == 1  # one writer's complete file, not a mix
    assert not list(tmp_path.glob(".*.tmp"))


def test_two_unforced_writers_to_one_path_cannot_both_succeed(tmp_path):
    target = tmp_path / "once.txt"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(target), "1", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    errors = [int(p.communicate(timeout=120)[0].strip()) for p in procs]
    assert sum(errors) == 7  # exactly one of the eight wrote the file


def test_several_deploys_sharing_one_fresh_cache_all_succeed_with_equal_results(tmp_path):
    env = {**os.environ, "EDGESMITH_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([*ES, "deploy", "digits-mlp", "--target", "host-cpu", "--out", str(tmp_path / f"r{i}"),
                               *QUICK], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(3)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-600:] for _, e in outs]
    reports = [json.loads((tmp_path / f"r{i}" / "report.json").read_text()) for i in range(3)]
    accs = {tuple(r["evaluation"]["value"] for r in rep["results"]) for rep in reports}
    assert len(accs) == 1  # the model trained (or loaded) once for all three is the same model
    ints = [(tmp_path / f"r{i}" / "artifacts" / "int8" / "model.int8.onnx").read_bytes() for i in range(3)]
    assert ints[0] == ints[1] == ints[2]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_relative_and_absolute_paths_and_repeated_runs_give_the_same_bytes(tmp_path):
    runs = []
    for i, out in enumerate(["rel.int8.onnx", str(tmp_path / "abs.int8.onnx"), "again.int8.onnx"]):
        proc = subprocess.run([*ES, "quantize", "digits-mlp", "--pass", "int8-qdq", "--out", out, "--quiet"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs.append(tmp_path / Path(out).name)
    assert _sha(runs[0]) == _sha(runs[1]) == _sha(runs[2])
    # a relative --out deploy: its int8 artifact equals the file quantize wrote (host-cpu builds the same int8 pass;
    # the Jetson's is TensorRT's symmetric form)
    proc = subprocess.run([*ES, "deploy", "digits-mlp", "--target", "host-cpu", "--variant", "int8",
                           "--out", "rel-deploy", "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert _sha(tmp_path / "rel-deploy" / "artifacts" / "int8" / "model.int8.onnx") == _sha(runs[0])


def _start_deploy(out: Path) -> subprocess.Popen:
    return subprocess.Popen([*ES, "deploy", "digits-wide", "--target", "host-cpu", "--out", str(out), "--variant", "fp32",
                             "--variant", "int8", "--reps", "2000", "--warmup", "1", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a shell without job control starts background jobs with SIGINT ignored, and Python
                            # then keeps ignoring it: give the deploy the default disposition a terminal gives
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _parent(pid: int) -> int:
    for line in _status(pid).splitlines():
        if line.startswith(b"ppid:"):
            return int(line.split()[1])
    return 0


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = _parent(pid)
        if pid == ancestor:
            return True
    return False


def _wait_for_workers(parent_pid: int, timeout: float = 240) -> list[int]:
    """PIDs of the latency workers the deploy has started (they run ``edgesmith.bench.measure.worker``)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        found = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if b"edgesmith.bench.measure.worker" in cmd and _descends_from(int(p.name), parent_pid):
                    found.append(int(p.name))
        if found:
            return found
        time.sleep(0.2)
    pytest.fail("the deploy never started a latency worker")


def _gone(pids: list[int], timeout: float = 20) -> bool:
    t0 = time.time()
    while time.time() - t0 < timeout:
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and b"zombie" not in _status(p)]
        if not alive:
            return True
        time.sleep(0.2)
    return False


def _status(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/status").read_bytes().lower()
    except OSError:
        return b""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_deploy_leaves_nothing_and_reruns_without_force(tmp_path, sig):
    out = tmp_path / "r"
    proc = _start_deploy(out)
    workers = _wait_for_workers(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "interrupted; nothing was written" in err
    assert not out.exists()
    assert _gone(workers), "a latency worker outlived its deploy"
    if sig == signal.SIGKILL:
        assert list(tmp_path.glob(".r.*.tmp"))  # what a killed process leaves; the next run sweeps it
    rerun = subprocess.run([*ES, "deploy", "digits-wide", "--target", "host-cpu", "--out", str(out), "--variant", "fp32",
                            "--reps", "5", "--warmup", "1", "--quiet", "--no-tvm", "--batch", "1"],
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-500:]
    assert (out / "report.json").exists() and not list(tmp_path.glob(".r.*.tmp"))


def test_a_cache_miss_loads_the_shipped_weights_and_a_broken_shipped_file_is_retrained(tmp_path, monkeypatch):
    import torch

    import edgesmith.common.cache as common

    shipped = tmp_path / "weights"
    shipped.mkdir()
    monkeypatch.setattr(common, "SHIPPED_WEIGHTS", shipped)
    torch.save({"w": torch.ones(3)}, shipped / "m-abc.pt")
    built = []
    value, hit = common.torch_cached(tmp_path / "cache" / "models" / "m-abc.pt", lambda: built.append(1) or {"w": torch.zeros(3)})
    assert hit and not built and torch.equal(value["w"], torch.ones(3))
    assert not (tmp_path / "cache" / "models" / "m-abc.pt").exists()  # the shipped file is read, not copied
    (shipped / "m-bad.pt").write_bytes(b"not a checkpoint")
    value, hit = common.torch_cached(tmp_path / "cache" / "models" / "m-bad.pt", lambda: {"w": torch.zeros(3)})
    assert not hit and torch.equal(value["w"], torch.zeros(3))


def test_a_sweep_killed_by_sigkill_leaves_no_worker_or_tracker_running(tmp_path):
    import psutil

    (tmp_path / "s.toml").write_text('model = "digits-mlp"\ntarget = "host-cpu"\n[plan]\ntvm = false\n'
                                     "[bench]\nreps = 2000\n[grid]\nseed = [0, 1, 2, 3]\n")
    p = subprocess.Popen([*ES, "sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"), "--workers", "2",
                          "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((tmp_path / "o" / "cells").glob("*/.running.lock"))) < 2:
        time.sleep(0.2)  # both workers hold a cell: the pool, its workers and the resource tracker are up
    children = psutil.Process(p.pid).children(recursive=True)
    assert len(children) >= 3, children
    p.kill()  # SIGKILL: no handler of the sweep runs
    p.wait()
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [c.cmdline() for c in alive]
