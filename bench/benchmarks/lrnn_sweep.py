"""Width x sparsity sweep of the S5 denoiser: SI-SNR vs effective MACs vs memory, Pareto PNG, iso-accuracy.

    .venv/bin/python -m edgesmith.bench.benchmarks.lrnn_sweep --out runs/lrnn-sweep [--force] [--quick]

For each width: a dense model trained from scratch, then for each sparsity a copy pruned by IMP
(ERK, cubic schedule) with fine-tuning. Every point is scored on the test split (SI-SNR) and costed
per 8 ms step: effective MACs (non-zero weights plus the dense recurrence and D terms) and memory of
the w8a16 network (8-bit weights, CSR-like storage with 16-bit column indices and row pointers
where that is smaller than dense, 16-bit eigenvalues). Iso-accuracy: the dense curve (SI-SNR vs
log MACs, and vs log memory) is interpolated at each sparse point's SI-SNR, giving how many times
more compute and memory a dense model needs for the same SI-SNR.

The sweep uses a smaller data set than the deploy plan (``SWEEP_DATA``) to fit a 2-core budget.
"""
from __future__ import annotations

import argparse
import copy
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from edgesmith.compress.lrnn.prune import ImpConfig, prune_finetune
from edgesmith.common import EdgesmithError, atomic_path, write_json
from edgesmith.models.lrnn.data import DataConfig, load_splits
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser
from edgesmith.models.lrnn.train import TrainConfig, score, torch_mask_fn, train

SWEEP_DATA = DataConfig(n_train=128, n_val=16, n_test=32, clip_s=2.0)
WIDTHS = (0.5, 1.0, 2.0)
SPARSITIES = (0.0, 0.5, 0.75, 0.9)
PRUNE_END = 0.6  # reach the final sparsity at 60% of the short fine-tuning, leaving 40% to recover


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


def run_sweep(data: DataConfig, widths, sparsities, dense_epochs: int, prune_epochs: int, log=print) -> list[dict]:
    splits = load_splits(data)
    points = []
    for w in widths:
        dense = S5Denoiser(S5Config(width=w), seed=0)
        train(dense, splits["train"], TrainConfig(epochs=dense_epochs))
        for s in sparsities:
            m = dense
            if s > 0:
                m = copy.deepcopy(dense)
                prune_finetune(m, splits["train"], ImpConfig(sparsity=s, end=PRUNE_END),
                               TrainConfig(epochs=prune_epochs, lr=1e-3))
            res = score(torch_mask_fn(m), splits["test"])
            pt = {"width": w, "sparsity": s, "d_model": m.cfg.d_model, "modes": m.cfg.modes,
                  "si_snr_db": res["si_snr_db"], "si_snr_improvement_db": res["si_snr_improvement_db"],
                  "effective_macs": m.effective_macs_per_step(), "dense_macs": m.dense_macs_per_step(),
                  "memory_bytes": memory_bytes(m)}
            log(f"width {w} sparsity {s}: {pt['si_snr_db']:.2f} dB, {pt['effective_macs']} MACs, "
                f"{pt['memory_bytes']} B")
            points.append(pt)
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
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def sweep_into(folder: Path, quick: bool = False, dense_epochs: int = 6, prune_epochs: int = 3, log=print,
               widths=WIDTHS, sparsities=SPARSITIES, previous: list[dict] | None = None) -> dict:
    """Run the sweep (adding to ``previous`` points) and write ``sweep.json`` and ``pareto.png`` into ``folder``."""
    if quick:
        data, widths, sparsities, de, pe = DataConfig.tiny(), (0.25, 0.5), (0.0, 0.9), 2, 1
    else:
        data, de, pe = SWEEP_DATA, dense_epochs, prune_epochs
    points = list(previous or []) + run_sweep(data, widths, sparsities, de, pe, log=log)
    result = {"data": asdict(data), "dense_epochs": de, "prune_epochs": pe, "prune_end": PRUNE_END,
              "points": points, "pareto_macs": pareto(points, "effective_macs"),
              "pareto_memory": pareto(points, "memory_bytes"), "iso_accuracy": iso_accuracy(points)}
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
    ap.add_argument("--quick", action="store_true", help="tiny data, two widths, two sparsities (seconds)")
    ap.add_argument("--dense-epochs", type=int, default=6)
    ap.add_argument("--prune-epochs", type=int, default=3)
    ap.add_argument("--widths", type=float, nargs="*", default=list(WIDTHS))
    ap.add_argument("--sparsities", type=float, nargs="+", default=list(SPARSITIES))
    ap.add_argument("--add-to", type=Path, default=None, help="keep the points of this earlier sweep.json")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists() and not a.force:
        raise EdgesmithError(f"{out} already exists.", "choose another --out folder or pass --force.")
    previous = json.loads(Path(a.add_to).read_text())["points"] if a.add_to else None
    with atomic_path(out, force=a.force) as tmp:
        tmp.mkdir(parents=True)
        result = sweep_into(tmp, a.quick, a.dense_epochs, a.prune_epochs, widths=tuple(a.widths),
                            sparsities=tuple(a.sparsities), previous=previous)
    print("\n".join(iso_lines(result)) or "no sparse point falls inside the dense SI-SNR range")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
