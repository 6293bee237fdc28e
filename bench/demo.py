"""``edgesmith demo``: the main job on built-in defaults, driven by a recipe.

Runs every ``[[deploy]]`` of the recipe (default ``bench/recipes/demo.toml``: one model of each kind on
the targets that support it) through the one deploy pipeline and writes one report folder per deploy
plus a summary page. TVM rows use the tuning records shipped in the repository or cached; fresh
MetaSchedule tuning happens only when asked (``--tvm-tune-trials``).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgesmith.bench.recipe import deploy_options, load_recipe
from edgesmith.bench.report.schema import DeployReport
from edgesmith.bench.report.writers import _fmt_j, _fmt_s
from edgesmith.common import EdgesmithError, atomic_path, check_output, write_json

DEMO_RECIPE = Path(__file__).resolve().parent / "recipes" / "demo.toml"


def run_demo(recipe_path: Path, out: Path, *, force: bool = False, progress: bool = True,
             tune_trials: int = 0) -> Path:
    recipe = load_recipe(str(recipe_path))
    deploys = recipe.get("deploy") or []
    if not deploys:
        raise EdgesmithError(f"recipe {recipe_path} lists no [[deploy]] tables.", "add one per model and target.")
    check_output(out, force=force, folder=True)
    flags = argparse.Namespace(quiet=not progress, tvm_tune_trials=tune_trials or None)
    # every deploy's options are built (and so checked) before the first one runs
    from edgesmith.bench.pipeline.deploy import deploy, preflight

    runs = []
    for i, entry in enumerate(deploys):
        folder = f"{entry.get('model', recipe.get('model'))}-{entry.get('target', recipe.get('target'))}"
        opts = deploy_options(flags, recipe, {**entry, "out": folder})
        try:
            preflight(opts)
        except EdgesmithError as e:
            raise EdgesmithError(f"recipe {recipe_path} [[deploy]] {i + 1}: {e.problem}", e.fix) from None
        runs.append((folder, opts))
    with atomic_path(out, force=force) as tmp:
        tmp.mkdir(parents=True)
        summary = []
        for folder, opts in runs:
            opts.out = tmp / folder
            opts.force = False
            deploy(opts)
            summary.append(DeployReport.load(opts.out / "report.json"))
        write_json(tmp / "summary.json", [_summary_rows(r) for r in summary])
        (tmp / "summary.md").write_text(render_summary(summary))
    return out


def _summary_rows(report: DeployReport) -> dict:
    return {
        "model": report.model,
        "kind": report.kind_name,
        "target": report.target_name,
        "reference": report.reference.evaluation.to_dict(),
        "rows": [{
            "variant": r.variant, "runtime": r.runtime_label, "metric": r.evaluation.value,
            "size_bytes": r.size_bytes,
            "latency": {str(b): {"p50": t.p50, "provenance": t.provenance} for b, t in r.latency.items()},
            "speed": {str(b): s.to_dict() for b, s in r.speed.items()},
            "energy_j_per_unit": r.energy.energy_j_per_sample, "energy_per": report.unit,
            "energy_provenance": r.energy.provenance,
        } for r in report.results],
    }


def render_summary(reports: list[DeployReport]) -> str:
    lines = ["# edgesmith demo", "",
             "Each row: one compressed variant in one runtime. Latency and energy carry their provenance: "
             "`measured` on this machine, or `estimated` from the target's cost model (coefficients and sources in "
             "each report). Speed is the model kind's figure (samples/s, tokens/s, real-time factor).", ""]
    for rep in reports:
        ref = rep.reference.evaluation
        batches = rep.batch_sizes
        folder = f"{rep.model}-{rep.target_name}"
        # the model's size and the data it was scored on, so two rows of one model never read as the same thing
        given = rep.model_options
        size = f" [{', '.join(f'{k}={json.dumps(v)}' for k, v in given.items())}]" if given else ""
        on = f" on {ref.n_samples} samples" if ref.n_samples else ""
        lines += [f"## {rep.model}{size} ({rep.kind_name}) on {rep.target_name}", "",
                  f"reference ({rep.reference.runtime}) {ref.metric} = {ref.value:.4f}{on}. Full report: "
                  f"[{folder}/report.md]({folder}/report.md)", "",
                  f"| variant | runtime | {ref.metric} | size | " + " | ".join(f"p50 b={b}" for b in batches)
                  + f" | speed b={batches[0]} | energy/{rep.unit} |", "|" + "---|" * (6 + len(batches))]
        for r in rep.results:
            lat = [f"{_fmt_s(r.latency[b].p50)} ({r.latency[b].provenance})" for b in batches]
            sp = r.speed.get(batches[0])
            lines.append(f"| {r.variant} | {r.runtime_label} | {r.evaluation.value:.4f} | "
                         f"{r.size_bytes / 1024:.1f} KiB | " + " | ".join(lat)
                         + (f" | {sp.value:.4g} {sp.unit}" if sp else " | -")
                         + f" | {_fmt_j(r.energy.energy_j_per_sample)} ({r.energy.provenance}) |")
        lines.append("")
        ratios = _int8_ratios(rep)
        if ratios:
            lines += ["int8 / fp32 p50 latency ratio (onnxruntime, measured): "
                      + ", ".join(f"batch {b}: {v:.2f} (int8 "
                                  + (f"{1 / v:.2f}x faster)" if v < 1 else f"{v:.2f}x slower)")
                                  for b, v in ratios.items()), ""]
    return "\n".join(lines) + "\n"


def _int8_ratios(report: DeployReport) -> dict:
    fp32, int8 = report.row("fp32", "onnxruntime"), report.row("int8", "onnxruntime")
    if not fp32 or not int8:
        return {}
    out = {}
    for b in report.batch_sizes:
        a, q = fp32.latency.get(b), int8.latency.get(b)
        if a and q and a.provenance == q.provenance == "measured":
            out[b] = q.p50 / a.p50
    return out
