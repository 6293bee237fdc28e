"""Scaling up, down and out on three targets: accuracy vs parameters, latency and energy, Pareto fronts.

    .venv/bin/python -m edgesmith.bench.studies.scaling_pareto --out runs/scaling-pareto [--force] [--quick]
        [--targets T ...] [--workers N] [--ray auto|ADDRESS] [--sweep-dir DIR]

Models (producer ``scaling-student``, see ``models/papers/scaling``): the teacher (scaling up), distilled
students at several widths (scaling down), and routers over specialists (scaling out). The deploys are
the cells of an ``edgesmith sweep`` (``bench/recipes/sweeps/scaling.toml``; ``--quick``: its test-size twin),
run in parallel or on Ray, cached per cell and resumable; this script adds the paper's view (non-zero
parameters as a cost, per-target tables and plots). Compression, measurement and estimation are the toolkit's own: on host-cpu the plan's fp32, int8 QDQ, int4 MatMulNBits and pruned (50% magnitude,
then int8) variants, latency measured in a fresh process per artifact, energy estimated by the host
cost model from that measured latency; on jetson-orin-nano fp32 and int8, latency and energy from its
roofline cost model; on loihi2 the fixed-point Sigma-Delta network simulated in Lava, latency and
energy from its activity counts. Loihi 2 runs only plain Linear/ReLU stacks (``export-netx``): the
routers (softmax gating, products) are left out there and the table says why.

Parameters are the non-zero ones (pruned variants lose their zeros). A point is Pareto-optimal on an
axis when no other point of the same target has cost <= and accuracy >= with one strict. Batch 1 only.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import time
from pathlib import Path

import numpy as np

from edgesmith.bench.pipeline.deploy import environment
from edgesmith.bench.sweep import RECIPES
from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError, atomic_path, write_json

PRODUCER = "scaling-student"
TARGETS = ("host-cpu", "jetson-orin-nano", "loihi2")
COSTS = ("params", "latency_s", "energy_j")
COST_LABELS = {"params": "non-zero parameters", "latency_s": "latency, batch 1 (s)", "energy_j": "energy / sample (J)"}


def recipe(quick: bool) -> Path:
    return RECIPES / ("scaling-quick.toml" if quick else "scaling.toml")


def label(model_options: dict) -> str:
    if model_options.get("teacher"):
        return "teacher"
    return f"{'router' if model_options.get('router') else 'student'}-w{model_options.get('width')}"


def pareto_front(costs, values) -> list[bool]:
    """Which points no other point dominates (cost <= and value >= with at least one strict)."""
    c = np.asarray(costs, dtype=float)
    v = np.asarray(values, dtype=float)
    front = []
    for i in range(len(c)):
        dominated = np.any((c <= c[i]) & (v >= v[i]) & ((c < c[i]) | (v > v[i])))
        front.append(not bool(dominated))
    return front


def loihi_support(producer) -> str | None:
    """None when export-netx can map the model, else the reason it cannot."""
    from edgesmith.compress.export_netx import linear_relu_layers

    try:
        linear_relu_layers(producer.module)
    except EdgesmithError as e:
        return e.problem
    return None


def _pruned_zeros(variant: dict) -> int:
    zeros = 0
    for rep in variant["pass_reports"]:
        for layer in rep.get("extra", {}).get("sparse_storage", {}).get("layers", []):
            zeros += layer["dense_bytes"] // 4 - layer["nnz"]
    return zeros


def rows_from_report(report: dict, label: str, n_params: int) -> list[dict]:
    """One row per (variant, runtime) of a deploy report: accuracy, params, size, latency, energy + provenance."""
    zeros = {v["name"]: _pruned_zeros(v) for v in report["variants"]}
    rows = []
    for r in report["results"]:
        lat = r["latency"]["1"]
        e = r["energy"]
        rows.append({
            "target": report["target"]["name"], "model": label, "variant": r["variant"], "runtime": r["runtime"],
            "accuracy": r["evaluation"]["value"], "params": n_params - zeros.get(r["variant"], 0),
            "size_bytes": r["size_bytes"], "latency_s": lat["p50"], "latency_provenance": lat["provenance"],
            "energy_j": e["energy_j_per_sample"], "energy_provenance": e["provenance"],
        })
    return rows


def mark_fronts(rows: list[dict]) -> None:
    for target in {r["target"] for r in rows}:
        mine = [r for r in rows if r["target"] == target]
        for cost in COSTS:
            for r, on in zip(mine, pareto_front([r[cost] for r in mine], [r["accuracy"] for r in mine])):
                r[f"pareto_{cost}"] = on


def run_study(out: Path, quick: bool, targets, workers: int | None = None, ray: str | None = None,
              sweep_dir: Path | None = None, log=print):
    """The recipe's cells on ``targets`` through ``edgesmith sweep`` (in ``sweep_dir``, default ``out/cells``);
    rows with non-zero parameter counts, and the routers' reason for not running on loihi2."""
    from edgesmith.bench.sweep import cell_report, require_done, run_sweep

    sweep_dir = sweep_dir or out / "cells"
    sweep = require_done(run_sweep(recipe(quick), sweep_dir, workers=workers, ray=ray, log=log,
                                   select=lambda c: c.spec["target"] in targets), sweep_dir)
    rows, skipped, seen = [], [], set()
    for cell in sweep["cells"]:
        spec = cell["spec"]
        opts = spec.get("model_options", {})
        producer = get_producer(PRODUCER, seed=spec.get("seed", 0), **opts).build()  # cached: reads the weights
        report = cell_report(sweep_dir, cell["key"])
        rows += rows_from_report(report, label(opts), producer.n_params())
        if "loihi2" in targets and label(opts) not in seen and (why := loihi_support(producer)):
            skipped.append({"model": label(opts), "target": "loihi2", "reason": why})
        seen.add(label(opts))
    mark_fronts(rows)
    return rows, skipped, sweep["run"]


def _fmt(x: float, unit: str) -> str:
    for name, scale in (("", 1), ("m", 1e-3), ("u", 1e-6), ("n", 1e-9)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {name}{unit}"
    return f"{x / 1e-12:.3g} p{unit}"


def render_markdown(table: dict) -> str:
    lines = ["# Scaling up, down and out: Pareto study (scaling-student on sklearn digits)", "",
             f"- date {table['date']}, seed {table['seed']}, batch 1, {table['settings']['reps']} timed calls "
             f"(host-cpu), {table['settings']['threads']} thread(s); wall time {table['wall_s']:.0f} s",
             "- P/L/E: Pareto-optimal against parameters / latency / energy among the points of the same target", ""]
    for target in table["targets"]:
        rows = [r for r in table["rows"] if r["target"] == target]
        lines += [f"## {target}", "",
                  "| model | variant | params | size | accuracy | latency b=1 | energy / sample | front |",
                  "|---|---|---:|---:|---:|---|---|---|"]
        for r in rows:
            front = "".join(k for k, c in zip("PLE", COSTS) if r.get(f"pareto_{c}")) or "-"
            lines.append(f"| {r['model']} | {r['variant']} | {r['params']} | {r['size_bytes']} B | {r['accuracy']:.4f} | "
                         f"{_fmt(r['latency_s'], 's')} ({r['latency_provenance']}) | "
                         f"{_fmt(r['energy_j'], 'J')} ({r['energy_provenance']}) | {front} |")
        lines.append("")
    if table["skipped"]:
        lines += ["## Not run", ""]
        lines += [f"- {s['model']} on {s['target']}: {s['reason']}" for s in table["skipped"]]
        lines.append("")
    lines += ["## Notes", ""] + [f"- {n}" for n in table["notes"]]
    return "\n".join(lines) + "\n"


def plot_target(rows: list[dict], target: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if r["target"] == target]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    families = {"teacher": "s", "student": "o", "router": "^"}
    variants = sorted({r["variant"] for r in mine})
    colors = dict(zip(variants, plt.cm.tab10.colors))
    for ax, cost in zip(axes, COSTS):
        for r in mine:
            fam = r["model"].split("-")[0]
            ax.scatter(r[cost], r["accuracy"], marker=families.get(fam, "x"), color=colors[r["variant"]], s=36, zorder=3)
        front = sorted((r for r in mine if r[f"pareto_{cost}"]), key=lambda r: r[cost])
        ax.step([r[cost] for r in front], [r["accuracy"] for r in front], where="post", color="k", lw=1, zorder=2)
        ax.scatter([r[cost] for r in front], [r["accuracy"] for r in front], s=140, facecolors="none",
                   edgecolors="k", zorder=4)
        for r in front:
            ax.annotate(f"{r['model']}/{r['variant']}", (r[cost], r["accuracy"]), fontsize=6,
                        xytext=(3, -8), textcoords="offset points")
        prov = {r[cost.split('_')[0] + '_provenance'] for r in mine} if cost != "params" else {"counted"}
        ax.set_xscale("log")
        ax.set_xlabel(f"{COST_LABELS[cost]} [{'/'.join(sorted(prov))}]")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], ls="", marker=m, color="grey", label=f) for f, m in families.items()]
    handles += [plt.Line2D([], [], ls="", marker="o", color=colors[v], label=v) for v in variants]
    handles += [plt.Line2D([], [], ls="", marker="o", mfc="none", mec="k", ms=10, label="Pareto-optimal")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8)
    fig.suptitle(f"scaling-student on {target}", y=0.02)
    fig.tight_layout(rect=(0, 0.04, 1, 0.92))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgesmith.bench.studies.scaling_pareto", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="two tiny models, 5 timed calls (tests)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    ap.add_argument("--workers", type=int, default=None, help="sweep cells at a time (default: one per core)")
    ap.add_argument("--ray", default=None, help="run the cells on Ray: auto, an address, or local")
    ap.add_argument("--sweep-dir", type=Path, default=None,
                    help="the sweep folder to run or resume (default: OUT/cells, made anew with OUT)")
    args = ap.parse_args(argv)
    if args.out.exists() and not args.force:
        raise EdgesmithError(f"{args.out} already exists.", "choose another --out or pass --force to replace it.")
    from edgesmith.bench.sweep import load_sweep

    settings, cells = load_sweep(recipe(args.quick))
    base = cells[0].spec
    t0 = time.perf_counter()
    with atomic_path(args.out, force=args.force) as tmp:
        tmp.mkdir(parents=True)
        rows, skipped, run = run_study(tmp, args.quick, args.targets, args.workers, args.ray, args.sweep_dir)
        table = {
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "seed": base.get("seed", 0),
            "targets": args.targets, "recipe": str(recipe(args.quick)), "sweep_run": run,
            "models": {label(c.spec.get("model_options", {})): c.spec.get("model_options", {}) for c in cells},
            "settings": {"quick": args.quick, "reps": base["bench"]["reps"], "threads": base.get("threads", 1),
                         "batch": 1, "prune_sparsity": base["options"]["prune_sparsity"], "tvm": False},
            "environment": environment(), "wall_s": time.perf_counter() - t0, "rows": rows, "skipped": skipped,
            "notes": [
                "host-cpu latency is measured (fresh process per artifact, onnxruntime); its energy is estimated by "
                "the host-cpu cost model from that measured latency (no energy counters on this machine)",
                "jetson-orin-nano and loihi2 latency and energy are estimated by their cost models (no device here); "
                "their accuracy comes from onnxruntime (Jetson proxy) and the Lava fixed-point simulation",
                "router models compute every specialist in the graph: scaling out buys accuracy per parameter of "
                "each specialist, not latency, on a single device",
                "pruned = 50% per-layer magnitude pruning then int8 QDQ, no fine-tuning; params count non-zeros only",
            ],
        }
        write_json(tmp / "table.json", table)
        md = render_markdown(table)
        (tmp / "table.md").write_text(md)
        for target in args.targets:
            if any(r["target"] == target for r in rows):
                plot_target(rows, target, tmp / f"pareto_{target}.png")
        table["wall_s"] = time.perf_counter() - t0
        write_json(tmp / "table.json", table)
    print(md)
    print(f"written to {args.out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
