"""One sweep recipe run serially, in the local process pool, resumed, and on a two-node Ray cluster: wall times.

    .venv/bin/python -m edgesmith.bench.studies.sweep_modes --out runs/sweep-modes [--force]
        [--recipe bench/recipes/sweeps/lrnn-width-sparsity-quick.toml] [--resume-drop 3] [--no-ray]

Every mode starts from an empty model cache of its own (``EDGESMITH_CACHE`` in a scratch folder; the
synthesized LRNN clips are shared by a link, they are data, not results), so each trains what its cells
need and the wall times compare like with like. Modes: ``serial`` (``--workers 1``), ``parallel`` (one worker
per core), ``resumed`` (the parallel sweep folder with ``--resume-drop`` cells' records deleted, run again:
only those run), ``ray-2-nodes`` (``ray start --head --num-cpus 1`` plus ``ray start --address ... --num-cpus 1``
on this machine, the sweep with ``--ray ADDRESS``; each cell records the Ray node it ran on). Wall times are
MEASURED (perf_counter around ``run_sweep``, which includes process start-up and the merged report). Writes
``modes.json`` and ``modes.md`` into ``out`` atomically.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from edgesmith.bench.sweep import RECIPES, run_sweep
from edgesmith.common import EdgesmithError, atomic_path, cache_dir, write_json

RAY_PORT = 6391


def _fresh_cache(root: Path, name: str) -> Path:
    path = root / f"cache-{name}"
    path.mkdir(parents=True)
    data = cache_dir() / "lrnn-data"
    if data.exists():
        (path / "lrnn-data").symlink_to(data.resolve())
    return path


def _timed(recipe: Path, out: Path, cache: Path, **kw) -> dict:
    before = {p.parent.name for p in out.glob("cells/*/cell.json")}
    with mock.patch.dict(os.environ, {"EDGESMITH_CACHE": str(cache)}):
        t0 = time.perf_counter()
        report = run_sweep(recipe, out, progress=False, **kw)
        wall = time.perf_counter() - t0
    cells = [json.loads(p.read_text()) for p in sorted(out.glob("cells/*/cell.json")) if p.parent.name not in before]
    return {"wall_s": wall, "ran": report["run"]["ran"], "cached": report["run"]["cached"],
            "failed": report["run"]["failed"], "cells": len(report["cells"]),
            "sum_cell_wall_s": sum(c["wall_s"] for c in cells),  # the cells this run ran
            "ray_nodes": sorted({c["ray_node"] for c in cells if c.get("ray_node")})}


def _ray(*args: str, env: dict) -> None:
    ray = Path(sys.executable).parent / "ray"
    res = subprocess.run([str(ray), *args], env=env, capture_output=True, text=True, timeout=180)
    if res.returncode != 0:
        raise EdgesmithError(f"`ray {' '.join(args)}` failed: {res.stderr.strip().splitlines()[-1:]}",
                             "check that no other Ray cluster holds the port (ray stop).")


def run(recipe: Path, resume_drop: int, with_ray: bool, log=print) -> dict:
    out = {"recipe": str(recipe), "cores": os.cpu_count(), "modes": {},
           "provenance": "measured: time.perf_counter around run_sweep on this machine (2-core VM, CPU only)"}
    with tempfile.TemporaryDirectory(prefix="edgesmith-sweep-modes-") as tmp:
        root = Path(tmp)
        log("serial ...")
        out["modes"]["serial"] = _timed(recipe, root / "serial", _fresh_cache(root, "serial"), workers=1)
        log(f"  {out['modes']['serial']['wall_s']:.1f} s; parallel ...")
        cache_par = _fresh_cache(root, "parallel")
        out["modes"]["parallel"] = _timed(recipe, root / "parallel", cache_par, workers=0)
        log(f"  {out['modes']['parallel']['wall_s']:.1f} s; resumed ...")
        for p in sorted((root / "parallel").glob("cells/*/cell.json"))[:resume_drop]:
            p.unlink()
        out["modes"]["resumed"] = _timed(recipe, root / "parallel", cache_par, workers=0)
        out["modes"]["resumed"]["dropped"] = resume_drop
        if with_ray:
            log(f"  {out['modes']['resumed']['wall_s']:.1f} s; ray (two nodes) ...")
            cache_ray = _fresh_cache(root, "ray")
            # Ray 2.60 turns token authentication on for a local cluster once ~/.ray/auth_token exists (a plain
            # ray.init() writes it) but a joining `ray start --address` then stays without it: name the mode for
            # the head, the worker and this driver alike
            address = f"127.0.0.1:{RAY_PORT}"
            with mock.patch.dict(os.environ, {"RAY_AUTH_MODE": "token"}):
                env = {**os.environ, "EDGESMITH_CACHE": str(cache_ray)}
                try:
                    _ray("get-auth-token", "--generate", env=env)
                    _ray("start", "--head", "--num-cpus", "1", "--port", str(RAY_PORT), "--include-dashboard",
                         "false", "--disable-usage-stats", env=env)
                    _ray("start", "--address", address, "--num-cpus", "1", "--disable-usage-stats", env=env)
                    out["modes"]["ray-2-nodes"] = _timed(recipe, root / "ray", cache_ray, ray=address)
                finally:
                    subprocess.run([str(Path(sys.executable).parent / "ray"), "stop", "--force"], capture_output=True)
            log(f"  {out['modes']['ray-2-nodes']['wall_s']:.1f} s on nodes {out['modes']['ray-2-nodes']['ray_nodes']}")
    s, p = out["modes"]["serial"]["wall_s"], out["modes"]["parallel"]["wall_s"]
    out["speedup_parallel_over_serial"] = s / p
    return out


def markdown(r: dict) -> str:
    lines = ["# One sweep, four ways", "", f"Recipe `{Path(r['recipe']).name}` on a {r['cores']}-core machine; "
             "each mode from an empty model cache. Wall times " + r["provenance"] + ".", "",
             "| mode | cells run | cells found done | wall (s) | sum of the walls of the cells run (s) | Ray nodes used |",
             "|---|---|---|---|---|---|"]
    for name, m in r["modes"].items():
        lines.append(f"| {name} | {m['ran']} | {m['cached']} | {m['wall_s']:.1f} | {m['sum_cell_wall_s']:.1f} | "
                     f"{len(m['ray_nodes']) or '-'} |")
    lines += ["", f"Local parallel over serial: {r['speedup_parallel_over_serial']:.2f}x.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/sweep-modes")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--recipe", type=Path, default=RECIPES / "lrnn-width-sparsity-quick.toml")
    ap.add_argument("--resume-drop", type=int, default=3)
    ap.add_argument("--no-ray", action="store_true")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists() and not a.force:
        raise EdgesmithError(f"{out} already exists.", "choose another --out folder or pass --force.")
    if not a.no_ray and shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
        raise EdgesmithError("the ray command is not in this environment.", "pip install ray, or pass --no-ray.")
    result = run(a.recipe, a.resume_drop, not a.no_ray)
    with atomic_path(out, force=a.force) as tmp:
        tmp.mkdir(parents=True)
        write_json(tmp / "modes.json", result)
        (tmp / "modes.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
