"""Perplexity of the RWKV reference models: fp32 vs RTN, GPTQ, GPTVQ, RWKVQuant at ~3.3 and ~4.3 bpw.

    python -m edgesmith.bench.studies.rwkv_quant_table [--models rwkv6-ref rwkv7-ref] [--bits 3 4] \
        [--vectors quantized fp] [--out-dir docs/results/rwkv_quant] [--workers N] [--ray auto|ADDRESS] \
        [--sweep-dir DIR] [--quick | --recipe PATH]

The cells are an ``edgesmith sweep`` (``bench/recipes/sweeps/rwkv-quant-table.toml``; ``--quick``: its
test-size twin; ``--recipe``: a user's recipe of the same shape, e.g. with ``model_options.size = "large"``
or ``vq_scale_block``), run in parallel or on Ray, cached per cell and resumed: each is one host-cpu deploy of one
quantizer at one bit width and one treatment of the token-shift multiplication vectors (``quantize_vectors``:
3-bit codebooks, plain k-means for the baselines and the importance-weighted codebook for RWKVQuant, or kept
fp), scored on the step graph in onnxruntime on the evaluation split and on the validation split (stdlib
files past the training cap, never trained on, never evaluated), with per-window NLLs. Calibration is the
kind's 64 windows of 128 bytes from the training split; settings are the pass defaults (SQ group 64 with fp16
scale and integer zero point; VQ d=2 with codebooks sized to the same overhead).

What this script adds is the paper's view. Rows: ``rwkvquant`` is the paper's default percentile (90),
``rwkvquant-val`` the percentile of ``PERCENTILES`` with the lowest *validation* perplexity (the evaluation
scores of the other candidates are never looked at). "ΔNLL vs GPTQ" is the mean per-window difference of
next-byte NLL to GPTQ at the same bits and vector treatment (negative = better) with its paired standard
error over the evaluation windows: differences within ~2 SE are noise. Writes ``table_*.md``,
``results_*.json`` (every per-layer decision and error, every candidate's validation perplexity) and
``ppl_vs_bpw_*.png``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from edgesmith.bench.sweep import RECIPES
from edgesmith.common import EdgesmithError, atomic_path, write_json

METHODS = ("rtn", "gptq", "gptvq", "rwkvquant")
TUNED = "rwkvquant-val"  # RWKVQuant with its percentile chosen on the validation split
PERCENTILES = (50.0, 75.0, 90.0, 100.0)  # candidate thresholds in the recipe (share of matrices below tau)
DEFAULT_PERCENTILE = 90.0  # the paper's
VECTORS = {"quantized": True, "fp": False}
RECIPE, QUICK_RECIPE = RECIPES / "rwkv-quant-table.toml", RECIPES / "rwkv-quant-table-quick.toml"


def paired_vs(nll: np.ndarray, ref: np.ndarray) -> dict:
    """Mean per-window NLL difference to a reference method and its standard error (nats per byte)."""
    d = np.asarray(nll) - np.asarray(ref)
    return {"dnll": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")}


def choose_percentile(candidates: list[dict]) -> dict:
    """The candidate (a dict with ``percentile`` and ``val_ppl``) with the lowest validation perplexity; a tie
    goes to more SQ (the higher percentile). Evaluation scores are never looked at."""
    return min(candidates, key=lambda q: (q["val_ppl"], -q["percentile"]))


def _cell_rows(report: dict) -> tuple[dict, dict]:
    """(fp32 row, quantized row) of one cell's deploy report, with their per-window NLLs."""
    by_variant = {r["variant"]: r for r in report["results"] if r["runtime"] == "onnxruntime"}
    variants = {v["name"]: v for v in report["variants"]}

    def scored(name):
        ev = by_variant[name]["evaluation"]
        extra = ev["extra"]
        if "validation_window_nll" not in extra:
            raise EdgesmithError(f"the report of {report['model']} has no validation scores.",
                                 "run the recipe with model_options.validation = true.")
        return {"ppl": ev["value"], "val_ppl": extra["validation_perplexity"], "eval_tokens": ev["n_samples"],
                "val_tokens": extra["validation_tokens"], "data": extra.get("data"),
                "nll": np.asarray(extra["window_nll"]), "val_nll": np.asarray(extra["validation_window_nll"])}

    fp = {"method": "fp32", "bits": 32, "bpw": 32.0, **scored("fp32"),
          "size_bytes": variants["fp32"]["pass_reports"][0]["size_before_bytes"]}
    name = next(n for n in variants if n != "fp32")
    quant = variants[name]["pass_reports"][0]  # the RWKV quantizer's own report
    cfg = quant["config"]
    q = {"method": cfg["kind"].removeprefix("rwkv-"), "bits": cfg["bits"],
         "vectors": "quantized" if cfg["quantize_vectors"] else "fp", "percentile": cfg["sq_percentile"],
         "bpw": quant["bits_per_weight"], **scored(name), "n_vq": quant["extra"]["n_vq"],
         "n_sq": quant["extra"]["n_sq"], "size_bytes": quant["size_after_bytes"],
         "vector_bpw": quant["extra"]["vector_bits_per_weight"], "decision": quant["extra"]["decision"],
         "seconds": quant["seconds"], "layers": quant["layers"], "vq_scale_block": cfg.get("vq_scale_block")}
    return fp, q


def table_from_reports(reports: list[dict]) -> list[dict]:
    """Per model: the fp32 row, every (vectors, bits, method) row, ``TUNED`` picked on validation perplexity,
    and the paired comparison with GPTQ. Every cell deploys fp32 too: they must agree (same step graph)."""
    models: dict = {}
    for report in reports:
        fp, q = _cell_rows(report)
        m = models.setdefault(report["model"], {"fp": fp, "cells": []})
        if abs(m["fp"]["ppl"] - fp["ppl"]) > 1e-6 * fp["ppl"]:
            raise EdgesmithError(f"{report['model']}: fp32 perplexity differs between cells ({m['fp']['ppl']} vs "
                                 f"{fp['ppl']}).", "the cells were run on different data or code; run them again with --force.")
        m["cells"].append(q)
    results = []
    for name, m in models.items():
        fp, rows, nlls = m["fp"], [], {}
        groups: dict = {}
        for q in m["cells"]:
            groups.setdefault((q["vectors"], q["bits"], q["method"]), []).append(q)
        for (vec, bits, method), qs in sorted(groups.items(), key=lambda kv: (kv[0][0] != "quantized", kv[0][1],
                                                                              METHODS.index(kv[0][2]))):
            if method != "rwkvquant":
                rows.append(qs[0])
                continue
            default = [q for q in qs if q["percentile"] == DEFAULT_PERCENTILE]
            rows += default
            if len(qs) > 1:
                best = choose_percentile(qs)
                rows.append({**best, "method": TUNED,
                             "validation": [{"percentile": q["percentile"], "val_ppl": q["val_ppl"], "n_vq": q["n_vq"]}
                                            for q in sorted(qs, key=lambda q: q["percentile"])]})
        for r in rows:
            nlls[(r["vectors"], r["bits"], r["method"])] = r["nll"]
        for r in rows:
            ref = nlls.get((r["vectors"], r["bits"], "gptq"))
            if ref is not None and r["method"] != "gptq":
                r["vs_gptq"] = paired_vs(r["nll"], ref)
        clean = [{k: v for k, v in r.items() if k not in ("nll", "val_nll", "eval_tokens", "val_tokens", "data")}
                 for r in [fp, *rows]]
        results.append({"model": name, "eval_tokens": fp["eval_tokens"], "val_tokens": fp["val_tokens"],
                        "data": fp["data"], "rows": clean})
    return results


def run_table(recipe: Path, sweep_dir: Path, *, models=None, bits=None, vectors=None, workers: int | None = None,
              ray: str | None = None, log=print) -> tuple[list[dict], dict]:
    """The recipe's cells (those of ``models``, ``bits`` and ``vectors`` when given) through the sweep in
    ``sweep_dir``; returns the table and the sweep's run record."""
    from edgesmith.bench.sweep import cell_report, require_done, run_sweep

    def select(cell):
        spec, opts = cell.spec, cell.spec.get("options", {})
        return ((models is None or spec["model"] in models) and (bits is None or opts["bits"][0] in bits)
                and (vectors is None or opts.get("quantize_vectors", True) in vectors))

    sweep = require_done(run_sweep(recipe, sweep_dir, workers=workers, ray=ray, log=log, select=select), sweep_dir)
    reports = [cell_report(sweep_dir, c["key"]) for c in sweep["cells"]]
    return table_from_reports(reports), sweep["run"]


def markdown(results: list[dict]) -> str:
    lines = []
    for res in results:
        val = f", validation {res['val_tokens']} bytes" if "val_tokens" in res else ""
        lines += [f"### {res['model']} (eval {res['eval_tokens']} bytes{val}, data {res['data']})", "",
                  "| method | vectors | bits | bpw (linears) | val ppl | perplexity | Δ vs fp32 "
                  "| ΔNLL vs GPTQ ±SE (mnat/byte) | SQ/VQ layers | percentile | file size |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        fp = res["rows"][0]["ppl"]
        for r in res["rows"]:
            layers = "-" if r["method"] == "fp32" else f"{r['n_sq']}/{r['n_vq']}"
            pct = (r.get("decision") or {}).get("percentile", "-")
            vp = f"{r['val_ppl']:.4f}" if "val_ppl" in r else "-"
            vs = r.get("vs_gptq")
            paired = f"{1e3 * vs['dnll']:+.2f} ± {1e3 * vs['se']:.2f}" if vs else "-"
            norm = f" ({vq_note(r)})" if vq_note(r) else ""
            lines.append(f"| {r['method']}{norm} | {r.get('vectors', '-')} | {r['bits']} | {r['bpw']:.3f} | {vp} "
                         f"| {r['ppl']:.4f} | {r['ppl'] - fp:+.4f} | {paired} | {layers} | {pct} "
                         f"| {r['size_bytes'] / 1e3:.0f} kB |")
        lines.append("")
    return "\n".join(lines)


def vq_note(row: dict) -> str:
    """A row's label note when its VQ layers are normalised per block ("VQ normalised per 32"); "" where it has
    no VQ layer (on any seed: ``n_vq`` may be a list) or they are not normalised."""
    n_vq = row.get("n_vq")
    has_vq = any(n_vq) if isinstance(n_vq, list) else bool(n_vq)
    return f"VQ normalised per {row['vq_scale_block']}" if row.get("vq_scale_block") and has_vq else ""


def model_axes(n: int):
    """(figure, one axis per model) in a row, on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(5 * n, 4), squeeze=False)
    return fig, axes[0]


def write_outputs(out_dir: Path, tag: str, payload: dict, md: str, fig, plot_stem: str) -> None:
    """``results_TAG.json``, ``table_TAG.md`` and ``PLOT_STEM_TAG.png`` in ``out_dir``, each written atomically."""
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / f"results_{tag}.json", payload)
    with atomic_path(out_dir / f"table_{tag}.md", force=True) as tmp:
        tmp.write_text(md)
    fig.tight_layout()
    with atomic_path(out_dir / f"{plot_stem}_{tag}.png", force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def plot(results: list[dict]):
    fig, axes = model_axes(len(results))
    for ax, res in zip(axes, results):
        fp = res["rows"][0]["ppl"]
        for i, method in enumerate((*METHODS, TUNED)):
            for vec, style in (("quantized", "-"), ("fp", "--")):
                pts = sorted((r["bpw"], r["ppl"]) for r in res["rows"]
                             if r["method"] == method and r.get("vectors", "quantized") == vec)
                if not pts:  # a run over a subset of the methods or vector settings
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ls=style, color=f"C{i}",
                        label=method if vec == "quantized" else f"{method} (fp vectors)")
        ax.axhline(fp, color="k", ls=":", label="fp32")
        ax.set_title(res["model"]), ax.set_xlabel("bits per weight (block linears)"), ax.set_ylabel("perplexity")
        ax.legend(fontsize=7)
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=None, help="a subset of the recipe's models")
    ap.add_argument("--bits", nargs="+", type=int, default=None, help="a subset of the recipe's bit widths")
    ap.add_argument("--vectors", nargs="+", choices=sorted(VECTORS), default=None)
    ap.add_argument("--quick", action="store_true", help="the test-size recipe (rwkv7-ref, two windows; a minute)")
    ap.add_argument("--recipe", type=Path, default=None,
                    help="a recipe of the same shape instead of rwkv-quant-table.toml")
    ap.add_argument("--workers", type=int, default=None, help="sweep cells at a time (default: one per core)")
    ap.add_argument("--ray", default=None, help="run the cells on Ray: auto, an address, or local")
    ap.add_argument("--sweep-dir", type=Path, default=None,
                    help="the sweep folder to run or resume (default: the recipe's, runs/sweeps/...)")
    ap.add_argument("--out-dir", type=Path, default=Path("docs/results/rwkv_quant"))
    a = ap.parse_args(argv)
    if a.quick and a.recipe:
        ap.error("--quick names its own recipe; give --quick or --recipe, not both")
    recipe = a.recipe or (QUICK_RECIPE if a.quick else RECIPE)
    sweep_dir = a.sweep_dir or Path("runs/sweeps") / recipe.stem
    vectors = None if a.vectors is None else {VECTORS[v] for v in a.vectors}
    results, run = run_table(recipe, sweep_dir, models=a.models, bits=a.bits, vectors=vectors, workers=a.workers,
                             ray=a.ray)
    md = markdown(results)
    write_outputs(a.out_dir, "_".join(r["model"] for r in results),
                  {"recipe": str(recipe), "sweep_dir": str(sweep_dir), "sweep_run": run, "models": results}, md,
                  plot(results), "ppl_vs_bpw")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
