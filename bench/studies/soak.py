"""Soak: many deploys and quantizes in a row in one process, then several at once on one cache; nothing may grow.

    python -m edgesmith.bench.studies.soak --rounds 50 --parallel 8 --out docs/results/reliability/soak

Phase 1 runs ``--rounds`` rounds of one host-cpu deploy (fp32 and int8, latency measured in worker processes)
and one int8 quantize of an ONNX file through the CLI's ``main`` in this process, and after each round reads the
process's open file descriptors, threads, child processes, resident memory, and the temporary files left in
``$TMPDIR`` and the output folder. Growth is read from round ``--warm`` on (the first rounds fill caches and
import libraries). Phase 2 starts ``--parallel`` deploys at once as separate processes on one fresh cache: all
must succeed with the same result, and leave no process, temporary file or lock behind.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.bench.studies.claim_io import claim_command, user_error
from edgesmith.common import EdgesmithError, atomic_path, check_output

QUICK = ["--variant", "fp32", "--variant", "int8", "--no-tvm", "--reps", "10", "--warmup", "2", "--batch", "1",
         "--quiet"]


def _temp_files() -> int:
    tmp = Path(tempfile.gettempdir())
    return len(list(tmp.glob("edgesmith-*"))) + len(list(tmp.glob("tmp*")))


def _reading(proc, work: Path) -> dict:
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": proc.num_threads(),
            "children": len(proc.children(recursive=True)), "rss_mib": proc.memory_info().rss / 2**20,
            "tmpdir_entries": _temp_files(), "tmp_in_out": len(list(work.rglob("*.tmp")))}


def in_a_row(rounds: int, work: Path, log) -> list[dict]:
    import psutil

    from edgesmith.bench.cli import main
    from edgesmith.bench.fuzz import matmul_onnx

    proc = psutil.Process()
    matmul_onnx(work / "m.onnx", 64, 32)
    np.save(work / "c.npy", np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32))
    readings = []
    t0 = time.perf_counter()
    for i in range(rounds):
        out = work / f"deploy-{i}"
        if main(["deploy", "digits-mlp", "--target", "host-cpu", "--out", str(out), *QUICK]) != 0:
            raise EdgesmithError(f"soak deploy {i} failed.", "see the error above.")
        if main(["quantize", str(work / "m.onnx"), "--calibration-data", str(work / "c.npy"), "--out",
                 str(work / f"q-{i}.onnx"), "--quiet"]) != 0:
            raise EdgesmithError(f"soak quantize {i} failed.", "see the error above.")
        readings.append({"round": i + 1, **_reading(proc, work)})
        rate = (i + 1) / (time.perf_counter() - t0)
        log(f"round {i + 1}/{rounds} ({rate * 60:.1f}/min, ETA {(rounds - i - 1) / rate:.0f} s): "
            + ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in readings[-1].items()
                        if k != "round"))
    return readings


def at_once(n: int, work: Path) -> dict:
    import psutil

    env = {**os.environ, "EDGESMITH_CACHE": str(work / "cache")}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "edgesmith.bench.cli", "deploy", "digits-mlp", "--target",
                               "host-cpu", "--out", str(work / f"p{i}"), *QUICK], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(n)]
    pids = {p.pid for p in procs}
    outs = [p.communicate(timeout=1800) for p in procs]
    wall = time.perf_counter() - t0
    codes = [p.returncode for p in procs]
    metrics = set()
    for i in range(n):
        rep = work / f"p{i}" / "report.json"
        if rep.exists():
            metrics.add(json.dumps([r["evaluation"]["value"] for r in json.loads(rep.read_text())["results"]]))
    time.sleep(1.0)
    survivors = [q.pid for q in psutil.process_iter(["ppid"]) if q.info["ppid"] in pids]
    return {"processes": n, "exit_codes": codes, "wall_s": wall, "distinct_results": len(metrics),
            "survivors": survivors, "errors": [e[-300:] for (_, e), c in zip(outs, codes) if c != 0],
            "tmp_in_out": len(list(work.rglob("*.tmp"))),
            "lock_files": len(list((work / "cache").rglob("*.lock"))),
            "cache_entries": len([p for p in (work / "cache").rglob("*") if p.is_file()
                                  and not p.name.endswith(".lock")])}


def growth(readings: list[dict], warm: int) -> dict:
    base = readings[min(warm, len(readings)) - 1]
    last = readings[-1]
    return {k: last[k] - base[k] for k in ("fds", "threads", "children", "rss_mib", "tmpdir_entries", "tmp_in_out")}


def markdown(result: dict) -> str:
    g, p = result["growth"], result["at_once"]
    lines = [f"# Soak: {result['rounds']} deploys and quantizes in a row, {p['processes']} deploys at once", "",
             f"`{result['command']}` ({result['wall_s']:.0f} s wall)", "",
             f"In a row (one process, growth from round {result['warm']} to round {result['rounds']}):", "",
             "| open fds | threads | child processes | RSS MiB | $TMPDIR entries | .tmp in outputs |",
             "|---|---|---|---|---|---|",
             f"| {g['fds']:+d} | {g['threads']:+d} | {g['children']:+d} | {g['rss_mib']:+.1f} | "
             f"{g['tmpdir_entries']:+d} | {g['tmp_in_out']:+d} |", "",
             "| round | fds | threads | children | RSS MiB |", "|---|---|---|---|---|"]
    for r in result["readings"]:
        if r["round"] in (1, 2, 5, 10, 20, 30, 40, 50) or r["round"] == result["rounds"]:
            lines.append(f"| {r['round']} | {r['fds']} | {r['threads']} | {r['children']} | {r['rss_mib']:.0f} |")
    lines += ["", f"At once: {p['processes']} deploys on one fresh cache in {p['wall_s']:.0f} s; exit codes "
              f"{sorted(set(p['exit_codes']))}; {p['distinct_results']} distinct result(s); processes left "
              f"{len(p['survivors'])}; .tmp left {p['tmp_in_out']}; lock files {p['lock_files']} beside "
              f"{p['cache_entries']} cache entries.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--warm", type=int, default=5, help="growth is read from this round on")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.out:
            check_output(args.out, force=args.force, folder=True)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="edgesmith-soak-") as tmp:
            work = Path(tmp)
            (work / "row").mkdir()
            (work / "once").mkdir()
            readings = in_a_row(args.rounds, work / "row", lambda m: print(f"\r{m[:160]:<160}", end="",
                                                                           file=sys.stderr, flush=True))
            print(file=sys.stderr)
            once = at_once(args.parallel, work / "once")
        result = {"command": claim_command("edgesmith.bench.studies.soak", argv), "rounds": args.rounds,
                  "warm": args.warm, "readings": readings, "growth": growth(readings, args.warm), "at_once": once,
                  "wall_s": time.perf_counter() - t0}
        md = markdown(result)
        print(md)
        if args.out:
            with atomic_path(args.out, force=args.force) as tmp:
                tmp.mkdir(parents=True)
                (tmp / "soak.md").write_text(md)
                (tmp / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
        g = result["growth"]
        ok = (g["fds"] <= 0 and g["children"] <= 0 and g["tmpdir_entries"] <= 0 and g["tmp_in_out"] <= 0
              and set(once["exit_codes"]) == {0} and once["distinct_results"] == 1 and not once["survivors"])
        return 0 if ok else 1
    except EdgesmithError as e:
        return user_error(e)


if __name__ == "__main__":
    sys.exit(main())
