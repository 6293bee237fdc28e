"""Int8 PTQ with influence-selected vs randomly chosen calibration sets of the same size.

    .venv/bin/python -m edgesmith.bench.studies.calib_select --out runs/calib-select [--force] [--quick]

For each model, calibration size n and seed: draw a candidate pool of ``8 n`` training samples with
the seed (the whole training split when it is smaller), choose n of them with the ``random`` and with
the ``influence`` selector of ``compress.calibration_select`` (score computed in the fp32 model's
penultimate-activation space, classes = its predictions), quantize the fp32 ONNX export with the
``int8-qdq`` pass (minmax, through the pass machinery) calibrated on them, and score the int8 model
with the producer's metric and with the SQNR of its outputs against fp32 on the same evaluation
inputs (more sensitive than accuracy when int8 barely moves it). ``first`` (the producer's own first
n samples, deploy's default) is one reference point per size. Writes table.json, table.md and
calib_select.png into --out. Whether influence beats random is reported as measured.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.calibration_select import POOL_FACTOR, model_features, select_indices
from edgesmith.compress.export_onnx import ExportOnnxConfig
from edgesmith.compress.quant_int8 import Int8QdqConfig
from edgesmith.models import get_producer
from edgesmith.common import atomic_path, write_json
from edgesmith.runtimes import get_runtime

_ALL = 10**6  # "every training sample": calibration_data caps n at the split size


def _score(producer, art: Artifact) -> tuple[float, np.ndarray]:
    """The producer's metric for ``art`` and every output it produced during the evaluation."""
    rt = get_runtime("onnxruntime", threads=1).load(art)
    outs = []

    def predict(x):
        y = rt.run(x).outputs
        outs.append(np.asarray(y, dtype=np.float64).reshape(-1))
        return y

    return producer.evaluate(predict).value, np.concatenate(outs)


def _sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((ref - got) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref ** 2)) / noise)


def run_model(name: str, sizes, seeds, workdir: Path, model_options: dict) -> dict:
    producer = get_producer(name, seed=0, **model_options).build()
    art = Artifact("torch", module=producer.module, meta={"input_shape": list(producer.input_shape)})
    ctx = PassContext(workdir=workdir / name / "fp32", example_input=producer.example_inputs(1), progress=False)
    fp32, _ = run_passes(art, [ExportOnnxConfig()], ctx)
    fp32_metric, ref_out = _score(producer, fp32)
    everything = producer.calibration_data(_ALL)
    rows = []

    def quantize(calib: np.ndarray, tag: str) -> dict:
        qctx = PassContext(workdir=workdir / name / tag, calibration=calib, progress=False)
        q, _ = run_passes(fp32, [Int8QdqConfig(n_calibration=len(calib))], qctx)
        metric, out = _score(producer, q)
        return {"metric": metric, "output_sqnr_db": _sqnr_db(ref_out, out)}

    jobs = [(n, s) for n in sizes for s in seeds]
    for n in sizes:
        rows.append({"model": name, "selector": "first", "n": n, "seed": None,
                     **quantize(np.ascontiguousarray(everything[:n]), f"first-{n}")})
    for n, s in tqdm(jobs, desc=name, unit="pair", leave=False):
        rng = np.random.default_rng(10_000 + s)
        pool_idx = np.sort(rng.choice(len(everything), size=min(POOL_FACTOR * n, len(everything)), replace=False))
        pool = everything[pool_idx]
        feats, labels = model_features(producer.module, pool)
        for sel in ("random", "influence"):
            idx = select_indices(sel, pool, n, seed=s, features=feats, labels=labels)
            rows.append({"model": name, "selector": sel, "n": n, "seed": s,
                         **quantize(np.ascontiguousarray(pool[idx]), f"{sel}-{n}-{s}")})
    return {"model": name, "metric": producer.metric.name, "fp32": fp32_metric, "rows": rows,
            "training_pool": len(everything)}


def summarise(results: list[dict]) -> list[dict]:
    out = []
    for res in results:
        for n in sorted({r["n"] for r in res["rows"]}):
            for sel in ("first", "random", "influence"):
                mine = [r for r in res["rows"] if r["n"] == n and r["selector"] == sel]
                m = np.array([r["metric"] for r in mine])
                q = np.array([r["output_sqnr_db"] for r in mine])
                out.append({"model": res["model"], "metric": res["metric"], "fp32": res["fp32"], "n": n,
                            "selector": sel, "n_seeds": len(mine), "mean": float(m.mean()), "std": float(m.std()),
                            "sqnr_db_mean": float(q.mean()), "sqnr_db_std": float(q.std())})
    return out


def verdicts(summary: list[dict]) -> list[str]:
    """One line per model: in how many sizes influence beat random on mean metric and on mean SQNR."""
    lines = []
    for model in dict.fromkeys(r["model"] for r in summary):
        pairs = [(r, next(o for o in summary if o["model"] == model and o["n"] == r["n"] and o["selector"] == "random"))
                 for r in summary if r["model"] == model and r["selector"] == "influence"]
        better_m = sum(i["mean"] > r["mean"] for i, r in pairs)
        worse_m = sum(i["mean"] < r["mean"] for i, r in pairs)
        better_q = sum(i["sqnr_db_mean"] > r["sqnr_db_mean"] for i, r in pairs)
        lines.append(f"{model}: influence vs random, metric higher in {better_m}/{len(pairs)} sizes, lower in "
                     f"{worse_m}/{len(pairs)}; output SQNR higher in {better_q}/{len(pairs)} sizes.")
    return lines


def markdown(summary: list[dict], settings: dict, verdict: list[str]) -> str:
    lines = [f"int8 QDQ (minmax), calibration sizes {settings['sizes']}, seeds {settings['seeds']} "
             f"(pool of {POOL_FACTOR} n training samples per seed); mean ± std over seeds.", "",
             "| model | fp32 | n | selector | int8 metric | int8 output SQNR vs fp32 (dB) |",
             "|---|---:|---:|---|---:|---:|"]
    for r in summary:
        lines.append(f"| {r['model']} | {r['fp32']:.4f} | {r['n']} | {r['selector']} | "
                     f"{r['mean']:.4f} ± {r['std']:.4f} | {r['sqnr_db_mean']:.2f} ± {r['sqnr_db_std']:.2f} |")
    return "\n".join(lines + ["", *[f"- {v}" for v in verdict]])


def plot(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in summary))
    fig, axes = plt.subplots(2, len(models), figsize=(4.2 * len(models), 6.5), squeeze=False)
    for j, model in enumerate(models):
        for sel, style in (("random", "o-"), ("influence", "s-"), ("first", "x:")):
            mine = [r for r in summary if r["model"] == model and r["selector"] == sel]
            n = [r["n"] for r in mine]
            axes[0, j].errorbar(n, [r["mean"] for r in mine], yerr=[r["std"] for r in mine], fmt=style, capsize=3,
                                label=sel)
            axes[1, j].errorbar(n, [r["sqnr_db_mean"] for r in mine], yerr=[r["sqnr_db_std"] for r in mine],
                                fmt=style, capsize=3, label=sel)
        fp32 = next(r["fp32"] for r in summary if r["model"] == model)
        axes[0, j].axhline(fp32, color="k", lw=0.8, ls="--", label="fp32")
        axes[0, j].set_title(model)
        axes[0, j].set_ylabel(next(r["metric"] for r in summary if r["model"] == model))
        axes[1, j].set_ylabel("int8 output SQNR vs fp32 (dB)")
        for ax in axes[:, j]:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("calibration samples")
        axes[0, j].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/calib-select"))
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one small model, two sizes, two seeds (smoke test)")
    ap.add_argument("--models", nargs="+", default=["digits-mlp", "digits-wide", "noise-cnn"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = ap.parse_args(argv)
    model_options: dict = {}
    if args.quick:
        args.models, args.sizes, args.seeds = ["noise-cnn"], [4, 8], [0, 1]
        model_options = {"tiny": True}
    settings = {"models": args.models, "sizes": args.sizes, "seeds": args.seeds, "pool_factor": POOL_FACTOR,
                "calibration": "minmax", "activations": "uint8", "model_options": model_options}
    with atomic_path(args.out, force=args.force) as tmp:
        tmp.mkdir(parents=True)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="calib-select-") as work:
            results = [run_model(m, args.sizes, args.seeds, Path(work), model_options)
                       for m in tqdm(args.models, desc="models", unit="model")]
        summary = summarise(results)
        verdict = verdicts(summary)
        md = markdown(summary, settings, verdict)
        write_json(tmp / "table.json", {"experiment": "influence-selected vs random PTQ calibration data",
                                        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                        "settings": settings, "summary": summary, "verdict": verdict,
                                        "results": results, "wall_s": time.perf_counter() - t0})
        (tmp / "table.md").write_text(md + "\n")
        plot(summary, tmp / "calib_select.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
