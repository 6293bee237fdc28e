"""``edgesmith sweep recipe.toml``: a grid (or list) of deploys, run in parallel, cached per cell, merged.

A sweep recipe is a deploy recipe (``bench/recipe.py``) whose top level is shared by every cell, plus::

    [sweep]                       # how it runs (all optional)
    out = "runs/sweeps/lrnn"      # the sweep folder: cells/ and the merged report
    workers = 0                   # cells at a time on this machine; 0: one per core
    threads_per_cell = 1          # threads each cell's deploy trains and runs with (default 1: a cell is measured
                                  # the same way whatever the worker count, so a resumed sweep keeps its cells)
    [grid]                        # every combination of these values (a table's keys dotted or nested)
    target = ["host-cpu", "loihi2"]
    [grid.options]
    sparsity = [0.5, 0.9]
    [[cell]]                      # and/or cells listed one by one (deploy tables over the top level), each
    model_options = { width = 2.0 }   # crossed with the grid's axes it does not set itself

Each cell is one ``deploy`` (``bench/pipeline/deploy.py``). Its folder under ``cells/`` is named by a content hash
of what it deploys: the cell's deploy table (paths made absolute), the bytes of every file it names (model,
data) and the edgesmith version. A cell whose ``cell.json`` is there is done, so a rerun, or a sweep that was
interrupted, runs only the missing cells (``--force`` runs them all again). The threads a cell runs with are
part of its table (``threads``), so figures measured with different thread counts are never mixed. Cells run in a process pool on this
machine, or as Ray tasks with ``--ray auto|ADDRESS`` (Ray schedules; a task returns the cell's report, and
this process writes it). The merged report (``sweep.json``, ``sweep.md``, ``pareto.png``): every cell's rows
(variant x runtime) with the metric, size, batch-1 latency and energy per sample, and per target and metric
the Pareto front of the metric against each cost. A front never mixes provenances: measured and estimated
latencies (or energies) are ranked separately.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from edgesmith import __version__
from edgesmith.bench.recipe import INPUT_PATHS, anchored, check_deploy_table, deploy_options, merged, read_toml
from edgesmith.bench.report.schema import SweepReport, as_sweep_report
from edgesmith.common import EdgesmithError, Interrupted, atomic_path, check_output_path, scratch_dir, write_json
from edgesmith.common.checks import is_int

SWEEP = {"out": str, "workers": int, "threads_per_cell": int}
MARKER = ".edgesmith-sweep"
RECIPES = Path(__file__).resolve().parent / "recipes" / "sweeps"  # the sweeps shipped with the repository
COSTS = (("size_bytes", "size (bytes)"), ("latency_s", "batch-1 p50 latency (s)"),
         ("energy_j", "energy per sample (J)"))


def threads_per_cell(settings: dict) -> int:
    """Threads each cell deploys with: the recipe's ``threads_per_cell``, 1 when unset or 0."""
    return settings.get("threads_per_cell") or 1


@dataclass
class Cell:
    """One deploy of the sweep: ``params`` are its grid values (for tables), ``spec`` its whole deploy table."""

    index: int
    params: dict
    spec: dict
    key: str = ""

    @property
    def name(self) -> str:
        return ", ".join(f"{k}={json.dumps(v)}" for k, v in self.params.items()) or f"cell {self.index}"


# --- the recipe --------------------------------------------------------------------------------------------


def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _set_dotted(spec: dict, dotted: str, value) -> None:
    head, _, tail = dotted.partition(".")
    if tail:
        inner = spec.get(head)
        spec[head] = {**(inner if isinstance(inner, dict) else {}), tail: value}
    else:
        spec[head] = value


MAX_CELLS = 1000  # a larger grid is run only with --yes (yes=True): a typo in [grid] can multiply it by thousands


def load_sweep(path: str | os.PathLike, *, yes: bool = False) -> tuple[dict, list[Cell]]:
    """The sweep settings and its cells, every cell's deploy table checked (no work done yet); a grid of more than
    ``MAX_CELLS`` cells is refused unless ``yes``."""
    p = Path(path)
    data = read_toml(p, "sweep recipe")
    settings = data.pop("sweep", {})
    grid = data.pop("grid", {})
    listed = data.pop("cell", [])
    if not isinstance(settings, dict) or not isinstance(grid, dict):
        raise EdgesmithError(f"sweep recipe {p}: [sweep] and [grid] must be tables.", "write them as [sweep] / [grid].")
    for k, v in settings.items():
        if k not in SWEEP:
            raise EdgesmithError(f"sweep recipe {p}: unknown [sweep] key {k!r}.", f"valid keys: {', '.join(SWEEP)}.")
        if not isinstance(v, SWEEP[k]) or isinstance(v, bool) or (SWEEP[k] is int and v < 0):
            raise EdgesmithError(f"sweep recipe {p}: [sweep] {k} is {v!r}.",
                                 "use a path for out and whole numbers >= 0 for workers and threads_per_cell.")
    if not isinstance(listed, list) or not all(isinstance(c, dict) for c in listed):
        raise EdgesmithError(f"sweep recipe {p}: cell must be a list of [[cell]] tables.", "write each as [[cell]].")
    if "deploy" in data or any("deploy" in c for c in listed):  # a deploy recipe's list: a sweep would skip it
        raise EdgesmithError(f"sweep recipe {p}: [[deploy]] tables list the deploys of `edgesmith deploy --recipe`; "
                             "a sweep does not run them.", "write each as a [[cell]] table, or vary keys in [grid].")
    check_deploy_table(data, f"sweep recipe {p}")
    axes = _flatten(grid)
    for k, v in axes.items():
        if not isinstance(v, list) or not v:
            raise EdgesmithError(f"sweep recipe {p}: [grid] {k} is {v!r}, not a non-empty list of values.",
                                 f"write e.g. {k} = [value1, value2].")
    n_cells = sum(math.prod(len(v) for k, v in axes.items() if k not in _flatten(extra)) for extra in (listed or [{}]))
    if n_cells > MAX_CELLS and not yes:
        raise EdgesmithError(f"sweep recipe {p} has {n_cells:,} cells (more than {MAX_CELLS:,}).",
                             "check [grid] for a runaway axis, or pass --yes (yes=True) to run them all.")
    cells = []
    for extra in (listed or [{}]):
        own = _flatten(extra)  # a key a [[cell]] sets itself is not crossed with the grid for that cell
        free = {k: v for k, v in axes.items() if k not in own}
        for combo in (dict(zip(free, values)) for values in itertools.product(*free.values())):
            spec = merged(data, extra)
            for k, v in combo.items():
                _set_dotted(spec, k, v)
            params = {**own, **combo}
            where = f"sweep recipe {p} cell {len(cells) + 1} ({', '.join(f'{k}={v}' for k, v in params.items())})"
            spec = anchored(check_deploy_table(spec, where), p.parent, resolve=True)  # from the recipe's folder
            for k in ("model", "target"):
                if not spec.get(k):
                    raise EdgesmithError(f"{where}: no {k}.", f"set {k} at the top level, in [grid] or in each [[cell]].")
            cells.append(Cell(len(cells), params, spec))
    threads = threads_per_cell(settings)
    hashed: dict = {}  # each file hashed once for all the cells (they share the weights: 40 MB x 42 cells)
    for c in cells:  # the threads a cell is measured with are part of what it is (and of its key)
        c.spec.setdefault("threads", threads)
        try:
            _check_cell(c.spec)
        except EdgesmithError as e:
            raise EdgesmithError(f"sweep recipe {p} cell {c.index + 1} ({c.name}): {e.problem}", e.fix) from None
        c.key = cell_key(c.spec, hashed)
    if len({c.key for c in cells}) < len(cells):
        raise EdgesmithError(f"sweep recipe {p}: two cells deploy the same thing.",
                             "remove the repeated grid value or [[cell]] entry.")
    return settings, cells


def _check_cell(spec: dict) -> None:
    """What can be checked of a cell without building anything (``deploy.preflight``): a typo must not surface after
    an hour of cells."""
    from edgesmith.bench.pipeline.deploy import preflight

    preflight(deploy_options(argparse.Namespace(quiet=True), spec, {"out": "unused"}))


def _model_path(model: str) -> Path | None:
    from edgesmith.bench.sources.torch_factory import split_factory

    path = Path(split_factory(model)[0])
    return path if path.exists() else None


def _fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(q for q in path.rglob("*") if q.is_file()) if path.is_dir() else [path]
    for q in files:
        h.update(str(q.relative_to(path) if path.is_dir() else q.name).encode())
        with open(q, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _producer_weight_files(spec: dict) -> list[Path]:
    """The files a registered producer's model is loaded from (``Producer.weight_files``), for the cell's seed
    and model options; none for a path, an unknown name or options the producer refuses (the cell's deploy
    reports those)."""
    from edgesmith.models.base import producer_class

    cls = producer_class(spec["model"])
    if cls is None:
        return []
    try:
        return [Path(p) for p in cls(seed=spec.get("seed", 0), **spec.get("model_options", {})).weight_files()]
    except (TypeError, ValueError, EdgesmithError):
        return []


def cell_key(spec: dict, hashed: dict | None = None) -> str:
    """Content hash of one cell: its deploy table, the bytes of the files it names and of the weights a named
    producer loads (retrained weights make new cells), the edgesmith version. ``hashed`` (path -> hash) lets the
    cells of one recipe, keyed at one moment, hash a shared file once."""
    files = {}
    model = _model_path(spec["model"])
    named = [(k, Path(spec[k])) for k in INPUT_PATHS if k in spec]
    weights = [(f"weights:{p.name}", p) for p in ([] if model is not None else _producer_weight_files(spec))]
    for name, path in [("model", model)] + named + weights:
        if path is not None and path.exists():
            if hashed is None:
                files[name] = _fingerprint(path)
                continue
            where = str(path.resolve())
            if where not in hashed:
                hashed[where] = _fingerprint(path)
            files[name] = hashed[where]
    blob = json.dumps({"spec": {k: v for k, v in spec.items() if k not in ("out", "force")}, "files": files,
                       "edgesmith": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- one cell ----------------------------------------------------------------------------------------------


def _limit_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except Exception:  # Numba absent or already fixed at import: its kernels then use their own count
        pass


def run_cell(spec: dict, folder: str, threads: int) -> dict:
    """Deploy one cell into ``folder`` (a process pool worker or a Ray task); returns its summary and report."""
    from edgesmith.bench.demo import _summary_rows
    from edgesmith.bench.pipeline.deploy import deploy
    from edgesmith.bench.report.schema import DeployReport

    _limit_threads(threads)
    opts = deploy_options(argparse.Namespace(quiet=True), spec, {"out": folder, "force": True})
    t0 = time.perf_counter()
    deploy(opts)
    wall = time.perf_counter() - t0
    report = json.loads((Path(folder) / "report.json").read_text())
    return {"summary": _summary_rows(DeployReport.from_dict(report)), "wall_s": wall, "host": os.uname().nodename, "pid": os.getpid(),
            "report_md": (Path(folder) / "report.md").read_text(), "report": report}


ENV_KEYS = ("EDGESMITH_CACHE", "EDGESMITH_NO_SHIPPED_WEIGHTS")  # the driver's settings a Ray task runs under


def _ray_cell(spec: dict, threads: int, env: dict) -> dict:
    """A Ray task: deploy into a scratch folder of the worker's machine, hand back the report itself."""
    import ray

    for k in ENV_KEYS:  # a Ray worker is reused across tasks: set (or clear) what the driver had
        if k in env:
            os.environ[k] = env[k]
        else:
            os.environ.pop(k, None)
    with scratch_dir("sweep-cell") as tmp:
        result = run_cell(spec, str(Path(tmp) / "deploy"), threads)
    result["ray_node"] = ray.get_runtime_context().get_node_id()
    return result


def _write_cell(folder: Path, cell: Cell, result: dict, runner: str) -> dict:
    deploy_dir = folder / "deploy"
    if not (deploy_dir / "report.json").exists():  # a Ray task's deploy folder stayed on its worker
        with atomic_path(deploy_dir, force=True) as tmp:
            tmp.mkdir(parents=True)
            (tmp / ".edgesmith-output").touch()
            write_json(tmp / "report.json", result["report"])
            (tmp / "report.md").write_text(result["report_md"])
    record = {"key": cell.key, "index": cell.index, "params": cell.params, "spec": cell.spec,
              "runner": runner, "host": result["host"], "pid": result["pid"], "ray_node": result.get("ray_node"),
              "wall_s": result["wall_s"],
              "summary": result["summary"]}
    write_json(folder / "cell.json", record)
    return record


def _done(folder: Path, cell: Cell) -> dict | None:
    try:
        record = json.loads((folder / "cell.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return record if record.get("key") == cell.key else None


# --- the sweep ---------------------------------------------------------------------------------------------


def _prepare_out(out: Path) -> None:
    check_output_path(out)
    if out.exists() and not (out / MARKER).exists():
        raise EdgesmithError(f"{out} exists and is not a sweep folder.",
                             "choose another --out (a sweep folder is reused: its finished cells are kept).")
    (out / "cells").mkdir(parents=True, exist_ok=True)
    (out / MARKER).touch()
    (out / ".edgesmith-output").touch()


def run_sweep(recipe: str | os.PathLike, out: str | os.PathLike | None = None, *, workers: int | None = None,
              ray: str | None = None, force: bool = False, progress: bool = True, log=print, select=None,
              yes: bool = False) -> dict:
    """Run the cells of ``recipe`` not done yet; merge every cell into the sweep report. Returns its summary.
    ``select(cell) -> bool`` keeps a subset of the recipe's cells (a script's --targets, say)."""
    from tqdm.auto import tqdm

    settings, cells = load_sweep(recipe, yes=yes)
    if select is not None:
        cells = [c for c in cells if select(c)]
        if not cells:
            raise EdgesmithError(f"no cell of {recipe} is selected.", "widen the selection.")
    out = Path(out or settings.get("out") or f"runs/sweeps/{Path(recipe).stem}")
    cores = os.cpu_count() or 1
    workers = workers if workers is not None else settings.get("workers", 0)
    if not is_int(workers, 0):
        raise EdgesmithError(f"workers is {workers!r}.", "use a whole number >= 0 (0: one per core).")
    workers = workers or cores
    threads = threads_per_cell(settings)
    _prepare_out(out)
    records, todo = {}, []
    for c in cells:
        record = None if force else _done(out / "cells" / c.key, c)
        if record is not None:
            records[c.key] = record
        else:
            todo.append(c)
    log(f"[edgesmith] sweep {Path(recipe).name}: {len(cells)} cells, {len(records)} done before, {len(todo)} to run "
        + (f"on Ray ({ray})" if ray else f"on {min(workers, max(1, len(todo)))} local worker(s)")
        + f", {threads} thread(s) each")
    t0 = time.perf_counter()
    failed, elsewhere = {}, 0  # elsewhere: cells another sweep into the same folder finished meanwhile
    bar = tqdm(total=len(todo), desc="sweep", unit="cell", disable=not progress or not todo)
    run = _run_on_ray if ray else _run_local
    try:
        for cell, result, error in run(todo, out, workers, threads, ray, force):
            if error is None:
                elsewhere += result.get("ran") is False
                records[cell.key] = result["record"] if "record" in result else \
                    _write_cell(out / "cells" / cell.key, cell, result, "ray" if ray else "local")
            else:
                failed[cell.key] = {"cell": cell.name, "error": error}
                log(f"[edgesmith] cell {cell.name} failed: {error}")
            bar.update(1)
    except KeyboardInterrupt:
        raise Interrupted(f"the {len(records)} finished cell(s) of {len(cells)} are kept in {out}.",
                          "run the same command again to run the others.") from None
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    report = merge(cells, records, failed, {"recipe": str(Path(recipe).resolve()),
                                            "ran": len(todo) - len(failed) - elsewhere,
                                            "cached": len(cells) - len(todo) + elsewhere, "failed": len(failed),
                                            "wall_s": wall, "workers": None if ray else workers, "ray": ray,
                                            "threads_per_cell": threads})
    write_sweep_report(out, report)
    log(f"[edgesmith] sweep report: {out / 'sweep.md'} ({report['run']['ran']} ran, {report['run']['cached']} cached, "
        f"{len(failed)} failed, {wall:.1f} s)")
    return report


def require_done(report: dict, out: str | os.PathLike) -> dict:
    """A script's sweep: every cell must have finished; returns ``report``."""
    if report["run"]["failed"]:
        raise EdgesmithError(f"{report['run']['failed']} sweep cell(s) failed (see {out}/sweep.md).",
                             "fix what they report and run again: finished cells are kept.")
    return report


def cell_report(out: str | os.PathLike, key: str) -> dict:
    """The deploy report of the finished cell ``key`` of the sweep in ``out``."""
    return json.loads((Path(out) / "cells" / key / "deploy" / "report.json").read_text())


def _worker_init(parent: int) -> None:  # pragma: no cover - runs in each pool worker
    """A pool worker dies with the sweep: SIGKILL when its parent dies (even by SIGKILL), so neither it nor the
    resource tracker (whose pipe the workers hold) is left running; a parent already gone ends it at once."""
    from edgesmith.common import die_with_parent

    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)


def _local_cell(cell: Cell, folder: str, threads: int, force: bool) -> dict:
    """Run one cell in a pool worker under the cell's lock and record it there: a second sweep into the same folder
    waits for a cell the first one holds, then finds it done instead of running it again."""
    from filelock import FileLock

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".running.lock")):
        record = None if force else _done(folder, cell)
        if record is not None:
            return {"record": record, "ran": False}
        return {"record": _write_cell(folder, cell, run_cell(cell.spec, str(folder / "deploy"), threads), "local"),
                "ran": True}


def _run_local(todo: list[Cell], out: Path, workers: int, threads: int, _ray, force: bool = False):
    """(cell, result, error) as cells finish; one process per worker (spawned: no forked torch threads)."""
    if not todo:
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=get_context("spawn"),
                               initializer=_worker_init, initargs=(os.getpid(),))
    try:
        pending = {pool.submit(_local_cell, c, str(out / "cells" / c.key), threads, force): c for c in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                cell = pending.pop(fut)
                try:
                    yield cell, fut.result(), None
                except EdgesmithError as e:
                    yield cell, None, f"{e.problem} ({e.fix})" if e.fix else e.problem
                except Exception as e:  # a crashed cell is reported with the others, not the end of the sweep
                    yield cell, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _run_on_ray(todo: list[Cell], out: Path, workers: int, threads: int, address: str, force: bool = False):
    try:
        import ray
    except ImportError:
        raise EdgesmithError("Ray is not installed in this environment.", "pip install ray (make setup installs it).") from None
    if not todo:
        return
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=None if address == "local" else address, log_to_driver=False,
                     include_dashboard=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise EdgesmithError(f"cannot reach a Ray cluster at {address!r}: {str(e).splitlines()[0]}",
                                 "start one (ray start --head) or pass --ray local for a Ray instance of this process.") from None
    task = ray.remote(num_cpus=threads, max_retries=0)(_ray_cell)
    pending = {}
    try:
        env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
        pending = {task.remote(c.spec, threads, env): c for c in todo}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                cell = pending.pop(ref)
                try:
                    yield cell, ray.get(ref), None
                except ray.exceptions.RayTaskError as e:
                    cause = e.cause if getattr(e, "cause", None) is not None else e
                    msg = f"{cause.problem} ({cause.fix})" if isinstance(cause, EdgesmithError) else \
                        f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
                    yield cell, None, msg
    finally:
        for ref in pending:  # an interrupted sweep leaves no task running on the cluster
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


# --- the merged report -------------------------------------------------------------------------------------


def _rows(cells: list[Cell], records: dict) -> list[dict]:
    rows = []
    for c in cells:
        rec = records.get(c.key)
        if rec is None:
            continue
        s = rec["summary"]
        for r in s["rows"]:
            lat = r["latency"].get("1") or next(iter(r["latency"].values()), None)
            rows.append({"cell": c.index, "key": c.key, "params": c.params, "model": s["model"], "target": s["target"],
                         "variant": r["variant"], "runtime": r["runtime"],
                         "metric": s["reference"]["metric"], "higher_is_better": s["reference"]["higher_is_better"],
                         "value": r["metric"], "size_bytes": r["size_bytes"],
                         "latency_s": lat["p50"] if lat else None, "latency_provenance": lat["provenance"] if lat else None,
                         "energy_j": r["energy_j_per_unit"], "energy_provenance": r["energy_provenance"],
                         "energy_per": r["energy_per"]})
    return rows


def pareto_front(rows: list[dict], cost: str) -> list[dict]:
    """Rows no other row beats: as good or better on the metric at no more cost, strictly better on one."""
    def better(q, p):
        hib = p["higher_is_better"]
        ge = q["value"] >= p["value"] if hib else q["value"] <= p["value"]
        gt = q["value"] > p["value"] if hib else q["value"] < p["value"]
        return q[cost] <= p[cost] and ge and (q[cost] < p[cost] or gt)
    pts = [r for r in rows if r.get(cost) is not None]
    return sorted((p for p in pts if not any(better(q, p) for q in pts if q is not p)), key=lambda r: r[cost])


def fronts(rows: list[dict]) -> list[dict]:
    """Per target, metric and cost (and the cost's provenance): the Pareto front, as row indices."""
    out = []
    groups = sorted({(r["target"], r["metric"]) for r in rows})
    for target, metric in groups:
        group = [r for r in rows if r["target"] == target and r["metric"] == metric]
        for cost, _ in COSTS:
            prov_key = {"latency_s": "latency_provenance", "energy_j": "energy_provenance"}.get(cost)
            for prov in sorted({r[prov_key] for r in group if r[prov_key]} if prov_key else {"measured"}):
                sub = [r for r in group if (prov_key is None or r[prov_key] == prov) and r.get(cost) is not None]
                if sub:
                    front = pareto_front(sub, cost)
                    out.append({"target": target, "metric": metric, "cost": cost,
                                "provenance": prov if prov_key else "counted (file bytes)",
                                "rows": [rows.index(r) for r in front]})
    return out


def merge(cells: list[Cell], records: dict, failed: dict, run: dict) -> dict:
    rows = _rows(cells, records)
    return {"run": run, "cells": [{"index": c.index, "key": c.key, "params": c.params, "spec": c.spec,
                                   "status": "done" if c.key in records else ("failed" if c.key in failed else "missing"),
                                   "wall_s": records[c.key]["wall_s"] if c.key in records else None,
                                   "error": failed.get(c.key, {}).get("error")} for c in cells],
            "rows": rows, "fronts": fronts(rows)}


def _fmt(v, unit=""):
    return "-" if v is None else f"{v:.4g}{unit}"


def markdown(report: SweepReport | dict) -> str:
    report = as_sweep_report(report)
    run, rows = report.run, report.rows
    lines = ["# Sweep", "",
             f"Recipe `{run.recipe}`: {len(report.cells)} cells; this run ran {run.ran}, found {run.cached} "
             f"done before, {run.failed} failed; {run.wall_s:.1f} s wall "
             + (f"on Ray ({run.ray})" if run.ray else f"with {run.workers} local worker(s)")
             + f", {run.threads_per_cell} thread(s) per cell.", ""]
    if (run.workers or 0) > 1 or run.ray:
        lines += ["Measured latencies of cells that ran at the same time on one machine shared its cores and memory "
                  "bandwidth: compare them within a sweep, or rerun with `--workers 1` for figures of a quiet machine.",
                  ""]
    lines += ["| cell | params | status | cell wall (s) |", "|---|---|---|---|"]
    for c in report.cells:
        lines.append(f"| {c.index} | {', '.join(f'{k}={v}' for k, v in c.params.items())} | {c.status}"
                     + (f": {c.error}" if c.error else "") + f" | {_fmt(c.wall_s)} |")
    on_front = {}
    for f in report.fronts:
        for i in f.rows:
            on_front.setdefault(i, []).append(f.cost.split("_")[0])
    lines += ["", "Every row: one variant in one runtime of one cell. Latency is batch-1 p50; energy per "
              "sample. Each figure carries its provenance (measured here, or estimated by the target's cost "
              "model: coefficients and sources in each cell's deploy report). front: the costs on whose "
              "Pareto front the row lies (per target and metric, one provenance at a time).", "",
              "| cell | params | target | variant | runtime | metric | size | latency | energy | front |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        lines.append(f"| {r.cell} | {', '.join(f'{k}={v}' for k, v in r.params.items())} | {r.target} | "
                     f"{r.variant} | {r.runtime} | {r.metric} {r.value:.4g} | {r.size_bytes / 1024:.1f} KiB | "
                     f"{_fmt(r.latency_s, ' s')} ({r.latency_provenance}) | {_fmt(r.energy_j, ' J')} "
                     f"({r.energy_provenance}) | {', '.join(on_front.get(i, [])) or '-'} |")
    lines += ["", "![Pareto fronts](pareto.png)", ""]
    return "\n".join(lines)


def plot(report: SweepReport | dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = as_sweep_report(report)
    rows = report.rows
    groups = sorted({(r.target, r.metric) for r in rows})
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), len(COSTS), figsize=(4.2 * len(COSTS), 3.6 * len(groups)), squeeze=False)
    for gi, (target, metric) in enumerate(groups):
        for ci, (cost, label) in enumerate(COSTS):
            ax = axes[gi][ci]
            group = [r for r in rows if r.target == target and r.metric == metric and r.cost(cost) is not None]
            for variant in sorted({r.variant for r in group}):
                pts = [r for r in group if r.variant == variant]
                ax.scatter([r.cost(cost) for r in pts], [r.value for r in pts], s=18, label=variant)
            for f in report.fronts:
                if (f.target, f.metric, f.cost) == (target, metric, cost):
                    front = [rows[i] for i in f.rows]
                    ax.plot([r.cost(cost) for r in front], [r.value for r in front], "k--", lw=1,
                            label=f"front ({f.provenance})" if cost != "size_bytes" else "front")
            ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel(metric)
            ax.set_title(target, fontsize=9)
            ax.grid(alpha=0.3)
            if group:
                ax.legend(fontsize=6)
    fig.tight_layout()
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def write_sweep_report(out: Path, report: dict) -> None:
    write_json(out / "sweep.json", report)
    with atomic_path(out / "sweep.md", force=True) as tmp:
        tmp.write_text(markdown(report))
    plot(report, out / "pareto.png")
