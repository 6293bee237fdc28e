"""``edgesmith demo``: the main job on built-in defaults.

Deploys the digits classifier to every target (host CPU: fp32 / int8 QDQ / int4 weight-only under
onnxruntime and TVM; Jetson Orin Nano: modelled; Loihi 2: a Sigma-Delta network in Lava), plus the
MatMul-heavy ``digits-wide`` on the host CPU for the int8 vs fp32 speed-up at batch 64, and writes
one report folder per deploy and a summary page.
"""
from __future__ import annotations

import json
from pathlib import Path

from edgesmith.bench.deploy import DeployOptions, deploy
from edgesmith.bench.report import _fmt_j, _fmt_s
from edgesmith.hardware import PlanOptions
from edgesmith.common import EdgesmithError, atomic_path, write_json


def demo_runs(quick: bool, tune_trials: int) -> list[tuple[str, str, PlanOptions, dict]]:
    """(model, target, plan options, bench options) of each deploy in the demo."""
    reps = {"warmup": 5, "reps": 20} if quick else {"warmup": 20, "reps": 200}
    runs = [
        ("digits-mlp", "host-cpu", PlanOptions(tvm_tune_trials=0 if quick else tune_trials), reps),
        ("digits-mlp", "jetson-orin-nano", PlanOptions(), reps),
        ("digits-mlp", "loihi2", PlanOptions(), reps),
    ]
    if not quick:
        runs.append(("digits-wide", "host-cpu", PlanOptions(tvm=False), {**reps, "batch_sizes": (1, 64)}))
    return runs


def run_demo(out: Path, *, force: bool = False, quick: bool = False, progress: bool = True,
             tune_trials: int = 8) -> Path:
    if out.exists() and not force:
        raise EdgesmithError(f"output folder {out} already exists.", "choose another --out or pass --force.")
    with atomic_path(out, force=force) as tmp:
        tmp.mkdir(parents=True)
        summary = []
        for model, target, plan, bench_kw in demo_runs(quick, tune_trials):
            folder = tmp / f"{model}-{target}"
            deploy(DeployOptions(model=model, target=target, out=folder, plan=plan, progress=progress, **bench_kw))
            report = json.loads((folder / "report.json").read_text())
            summary.append(report)
        write_json(tmp / "summary.json", [_summary_rows(r) for r in summary])
        (tmp / "summary.md").write_text(render_summary(summary))
    return out


def _summary_rows(report: dict) -> dict:
    return {
        "model": report["model"],
        "target": report["target"]["name"],
        "reference": report["reference"]["evaluation"],
        "rows": [{
            "variant": r["variant"], "runtime": r["runtime_label"], "metric": r["evaluation"]["value"],
            "size_bytes": r["size_bytes"],
            "latency": {b: {"p50": e["p50"], "provenance": e["provenance"]} for b, e in r["latency"].items()},
            "energy_j_per_sample": r["energy"].get("energy_j_per_sample"), "energy_provenance": r["energy"]["provenance"],
        } for r in report["results"]],
    }


def render_summary(reports: list[dict]) -> str:
    lines = ["# edgesmith demo", "",
             "Each row: one compressed variant in one runtime. Latency and energy carry their provenance: "
             "`measured` on this machine, or `estimated` from the target's cost model (coefficients and sources in "
             "each report).", ""]
    for rep in reports:
        ref = rep["reference"]["evaluation"]
        batches = rep["batch_sizes"]
        lines += [f"## {rep['model']} on {rep['target']['name']}", "",
                  f"torch fp32 reference {ref['metric']} = {ref['value']:.4f}. Full report: "
                  f"[{rep['model']}-{rep['target']['name']}/report.md]({rep['model']}-{rep['target']['name']}/report.md)", "",
                  f"| variant | runtime | {ref['metric']} | size | " + " | ".join(f"p50 b={b}" for b in batches)
                  + " | energy/sample |", "|" + "---|" * (5 + len(batches))]
        for r in rep["results"]:
            lat = [f"{_fmt_s(r['latency'][str(b)]['p50'])} ({r['latency'][str(b)]['provenance']})" for b in batches]
            e = r["energy"]
            lines.append(f"| {r['variant']} | {r['runtime_label']} | {r['evaluation']['value']:.4f} | "
                         f"{r['size_bytes'] / 1024:.1f} KiB | " + " | ".join(lat)
                         + f" | {_fmt_j(e.get('energy_j_per_sample'))} ({e['provenance']}) |")
        lines.append("")
        ratios = _int8_ratios(rep)
        if ratios:
            lines += ["int8 / fp32 p50 latency ratio (onnxruntime, measured): "
                      + ", ".join(f"batch {b}: {v:.2f} (int8 "
                                  + (f"{1 / v:.2f}x faster)" if v < 1 else f"{v:.2f}x slower)")
                                  for b, v in ratios.items()), ""]
    return "\n".join(lines) + "\n"


def _int8_ratios(report: dict) -> dict:
    rows = {(r["variant"], r["runtime"]): r for r in report["results"]}
    fp32, int8 = rows.get(("fp32", "onnxruntime")), rows.get(("int8", "onnxruntime"))
    if not fp32 or not int8:
        return {}
    out = {}
    for b in report["batch_sizes"]:
        a, q = fp32["latency"].get(str(b)), int8["latency"].get(str(b))
        if a and q and a["provenance"] == q["provenance"] == "measured":
            out[b] = q["p50"] / a["p50"]
    return out
