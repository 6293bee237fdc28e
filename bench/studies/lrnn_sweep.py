"""Width x sparsity sweep of the S5 denoiser: SI-SNR vs effective MACs vs memory, Pareto PNG, iso-accuracy.

    .venv/bin/python -m edgesmith.bench.studies.lrnn_sweep --out runs/lrnn-sweep [--force] [--quick]
        [--workers N] [--ray auto|ADDRESS] [--sweep-dir DIR]

The cells are an ``edgesmith sweep`` (``bench/recipes/sweeps/lrnn-width-sparsity.toml``; ``--quick``: its
test-size twin): per width a dense model trained from scratch, and per sparsity that model pruned by IMP (ERK,
cubic schedule) with fine-tuning, then fine-tuned for w8a16. The sweep runs them in parallel (or on Ray),
caches each cell and resumes; its own report has the measured latencies and the Pareto fronts against
size, latency and energy. What this script adds is the paper's view: every float point (dense, pruned) costed
per 8 ms step by effective MACs (non-zero weights plus the dense recurrence and D terms) and memory of the
w8a16 network (8-bit weights, CSR-like storage with 16-bit column indices and row pointers where that is
smaller than dense, 16-bit eigenvalues), and iso-accuracy: the dense curve (SI-SNR vs log MACs, and vs log
memory) interpolated at each sparse point's SI-SNR, giving how many times more compute and memory a dense
model needs for the same SI-SNR. The models are read back from the cache the sweep filled (nothing retrains).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from edgesmith.bench.sweep import RECIPES
from edgesmith.common import EdgesmithError, atomic_path, write_json
from edgesmith.models.lrnn.s5 import S5Denoiser
from edgesmith.bench.studies.claim_io import save_png

RECIPE, QUICK_RECIPE = RECIPES / "lrnn-width-sparsity.toml", RECIPES / "lrnn-width-sparsity-quick.toml"


def memory_bytes(model: S5Denoiser) -> int:
    """w8a16 weight memory: per matrix min(dense int8, nnz values + 16-bit indices + row pointers)."""
    total = 0
    for _, group in model.prunable():
        for p in group:
            rows, numel = p.shape[0], p.numel()
            nnz = int((p != 0).sum())
            total += min(numel, 3 * nnz + 2 * (rows + 1))
    cfg = model.cfg
    return total + cfg.n_layers * (cfg.d_model + 2 * 2 * cfg.modes)  # D (8-bit) and lambda (2 x 16-bit)


def cell_model(spec: dict, sparse: bool) -> S5Denoiser:
    """A cell's float model as its deploy built it (producer and prune pass, both found in the cache)."""
    from edgesmith.bench.pipeline.deploy import source_artifact
    from edgesmith.compress import PassContext, run_passes
    from edgesmith.compress.lrnn.train_passes import PruneLrnnConfig
    from edgesmith.models import get_producer
    from edgesmith.models.kinds import get_kind

    seed = spec.get("seed", 0)
    prod = get_producer(spec["model"], seed=seed, **spec.get("model_options", {})).build()
    if not sparse:
        return prod.module_
    kopts = get_kind(prod.kind).options(spec.get("options", {}))
    prune = PruneLrnnConfig(sparsity=kopts.sparsity, epochs=kopts.prune_epochs, end=kopts.prune_end)
    with tempfile.TemporaryDirectory(prefix="edgesmith-lrnn-sweep-") as tmp:
        ctx = PassContext(workdir=Path(tmp), seed=seed, train_data=prod.training_data(),
                          example_input=prod.example_inputs(1))
        art, _ = run_passes(source_artifact(prod), [prune], ctx)
    return art.module


def points_from_sweep(sweep: dict) -> list[dict]:
    """One point per float row of the sweep (dense torch, sparse torch), with the w8a16 SI-SNR of the same
    cell beside it, costed from the model itself."""
    from edgesmith.models.kinds import get_kind

    by_cell = {}
    for r in sweep["rows"]:
        by_cell.setdefault(r["cell"], {})[r["variant"]] = r
    points = []
    for cell in sweep["cells"]:
        rows = by_cell.get(cell["index"], {})
        spec = cell["spec"]
        for variant in ("dense", "sparse"):
            if variant not in rows:
                continue
            m = cell_model(spec, sparse=variant == "sparse")
            fixed = rows.get("sparse-fixed")
            sparsity = get_kind("stream").options(spec.get("options", {})).sparsity if variant == "sparse" else 0.0
            points.append({"width": m.cfg.width, "sparsity": sparsity, "d_model": m.cfg.d_model, "modes": m.cfg.modes, "si_snr_db": rows[variant]["value"],
                           "si_snr_db_w8a16": fixed["value"] if fixed and variant == "sparse" else None,
                           "effective_macs": m.effective_macs_per_step(), "dense_macs": m.dense_macs_per_step(),
                           "memory_bytes": memory_bytes(m), "cell": cell["key"]})
    return points


def pareto(points: list[dict], cost: str) -> list[dict]:
    """Points not beaten by another with lower-or-equal cost and higher-or-equal SI-SNR."""
    front = [p for p in points if not any(q is not p and q[cost] <= p[cost] and q["si_snr_db"] >= p["si_snr_db"]
                                          and (q[cost] < p[cost] or q["si_snr_db"] > p["si_snr_db"]) for q in points)]
    return sorted(front, key=lambda p: p[cost])


def iso_accuracy(points: list[dict]) -> list[dict]:
    """For each sparse point inside the dense SI-SNR range: dense cost at equal SI-SNR / sparse cost.

    The dense curve is the dense models' own Pareto front for each cost (a dominated dense model, e.g.
    a wider one that trained worse, is not a fair reference), interpolated in log cost.
    """
    dense_all = [p for p in points if p["sparsity"] == 0]
    out = []
    for p in points:
        if p["sparsity"] == 0:
            continue
        row = {"width": p["width"], "sparsity": p["sparsity"], "si_snr_db": p["si_snr_db"]}
        for cost in ("effective_macs", "memory_bytes"):
            dense = pareto(dense_all, cost)
            snr = np.array([d["si_snr_db"] for d in dense])
            if len(dense) < 2 or not snr.min() <= p["si_snr_db"] <= snr.max():
                break
            logc = np.log(np.array([d[cost] for d in dense], np.float64))
            dense_cost = float(np.exp(np.interp(p["si_snr_db"], snr, logc)))
            row[f"dense_{cost}_at_same_si_snr"] = dense_cost
            row[f"{cost}_ratio_dense_over_sparse"] = dense_cost / p[cost]
        else:
            out.append(row)
    return out


def plot(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, cost, label in ((axes[0], "effective_macs", "effective MACs per 8 ms step"),
                            (axes[1], "memory_bytes", "w8a16 weight memory (bytes)")):
        for s in sorted({p["sparsity"] for p in points}):
            pts = sorted((p for p in points if p["sparsity"] == s), key=lambda p: p[cost])
            ax.plot([p[cost] for p in pts], [p["si_snr_db"] for p in pts], "o-", label=f"sparsity {s:.0%}")
        front = pareto(points, cost)
        ax.plot([p[cost] for p in front], [p["si_snr_db"] for p in front], "k--", lw=2, label="Pareto front")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("test SI-SNR (dB)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("S5 denoiser: width x sparsity sweep")
    fig.tight_layout()
    save_png(fig, path)


def sweep_into(folder: Path, quick: bool = False, log=print, workers: int | None = None, ray: str | None = None,
               sweep_dir: Path | None = None) -> dict:
    """Run (or resume) the sweep recipe's cells with ``edgesmith sweep`` in ``sweep_dir`` (default
    ``folder/cells``), then write the paper's view, ``sweep.json`` and ``pareto.png``, into ``folder``."""
    from edgesmith.bench.sweep import require_done, run_sweep

    recipe = QUICK_RECIPE if quick else RECIPE
    sweep_dir = sweep_dir or folder / "cells"
    sweep = require_done(run_sweep(recipe, sweep_dir, workers=workers, ray=ray, log=log), sweep_dir)
    points = points_from_sweep(sweep)
    result = {"recipe": str(recipe), "sweep_run": sweep["run"], "points": points,
              "pareto_macs": pareto(points, "effective_macs"), "pareto_memory": pareto(points, "memory_bytes"),
              "iso_accuracy": iso_accuracy(points)}
    write_json(folder / "sweep.json", result)
    plot(points, folder / "pareto.png")
    return result


def iso_lines(result: dict) -> list[str]:
    return [f"width {r['width']} at {r['sparsity']:.0%} sparsity ({r['si_snr_db']:.2f} dB): a dense model needs "
            f"{r['effective_macs_ratio_dense_over_sparse']:.2f}x the MACs and "
            f"{r['memory_bytes_ratio_dense_over_sparse']:.2f}x the memory" for r in result["iso_accuracy"]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/lrnn-sweep")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="the test-size recipe: tiny data, three widths (a minute)")
    ap.add_argument("--workers", type=int, default=None, help="sweep cells at a time (default: one per core)")
    ap.add_argument("--ray", default=None, help="run the cells on Ray: auto, an address, or local")
    ap.add_argument("--sweep-dir", type=Path, default=None,
                    help="the sweep folder to run or resume (default: OUT/cells, made anew with OUT)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists() and not a.force:
        raise EdgesmithError(f"{out} already exists.", "choose another --out folder or pass --force.")
    with atomic_path(out, force=a.force) as tmp:
        tmp.mkdir(parents=True)
        result = sweep_into(tmp, a.quick, workers=a.workers, ray=a.ray, sweep_dir=a.sweep_dir)
    print("\n".join(iso_lines(result)) or "no sparse point falls inside the dense SI-SNR range")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
