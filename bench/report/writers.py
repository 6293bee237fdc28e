"""Deploy reports: one JSON file (everything), one Markdown page (the tables a person reads) and PNG plots.

The JSON is the source of truth; the Markdown and the plots are rendered from it, so they never
disagree. Every latency and energy figure keeps its provenance label (measured / estimated) next to it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgesmith.bench.report.schema import DeployReport, Layer, ResultRow, as_report
from edgesmith.common import write_json


# a compressed variant's measured p50 above this multiple of the uncompressed one's is marked in the results table
SLOWER_MARGIN = 1.1


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.2f} s"


def _fmt_j(j: float | None) -> str:
    if j is None:
        return "-"
    for unit, scale in (("J", 1), ("mJ", 1e-3), ("uJ", 1e-6), ("nJ", 1e-9)):
        if abs(j) >= scale:
            return f"{j / scale:.3g} {unit}"
    return f"{j / 1e-12:.3g} pJ"


def _coverage(layers: list[Layer]) -> str:
    """How much of the model a pass's bits/weight describes: it counts the quantized layers only, so a convnet whose
    int4 pass reached only its classifier would otherwise read as a 5-bit model."""
    if not layers:
        return ""
    done = [x for x in layers if x.action == "quantized"]
    total = sum(x.n_params or 0 for x in layers)
    share = f" ({100 * sum(x.n_params or 0 for x in done) / total:.0f}% of their weights)" if total else ""
    return f", on {len(done)} of {len(layers)} weight layers{share}"


def _fmt_bytes(b: float | None) -> str:
    if b is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{int(b)} B"


def render_markdown(report: DeployReport | dict) -> str:
    """The human-readable page of a deploy report."""
    report = as_report(report)
    ref = report.reference
    metric = ref.evaluation.metric
    unit = report.unit
    kind = report.kind_name
    batches = report.batch_sizes
    env = report.environment
    lines = [
        f"# edgesmith deploy: {report.model} ({kind}) on {report.target.name}",
        "",
        f"- date: {report.date}; edgesmith {env.get('edgesmith', '?')}; "
        f"seed {report.seed}",
        f"- machine: {env.get('cpu', '?')}, {env.get('cpu_count', '?')} cores; "
        f"threads used: {report.threads}",
        f"- reference: {ref.runtime} ({ref.format}), {metric} = "
        f"{ref.evaluation.value:.4f} on {ref.evaluation.n_samples} "
        + (f"samples of {ref.evaluation.extra['data']}" if "data" in ref.evaluation.extra else "held-out samples"),
        f"- latency: **{report.plan.latency_provenance}**"
        + (" (" + report.latency_method + ")" if report.latency_method else ""),
        *[f"- **not built: {name}**: {why}" for name, why in report.plan.not_built.items()],
        f"- speed: the {kind} kind's figure per timed call; energy per {unit}: see the provenance column; "
        "coefficients and sources are listed at the end of this page",
        *([""] + [f"> **warning**: {w}" for w in report.warnings] if report.warnings else []),
        *(["", f"> **decision**: {report.more['decision']['summary']} (every candidate and why: "
               f"[decision.md](decision.md); the artifact: `chosen/`)"] if report.more.get("decision") else []),
        "",
        "## Results",
        "",
        f"| variant | runtime | {metric} | Δ vs reference | size on disk | bits/weight | max abs diff vs reference | "
        + " | ".join(f"p50 b={b}" for b in batches) + " | " + " | ".join(f"speed b={b}" for b in batches)
        + f" | energy / {unit} | energy provenance |",
        "|" + "---|" * (9 + 2 * len(batches)),
    ]
    baseline = report.variants[0].name if report.variants else None  # the plan's uncompressed variant
    base_p50 = {(r.runtime_label, b): t.p50 for r in report.results if r.variant == baseline
                for b, t in r.latency.items() if t.provenance == "measured"}
    for r in report.results:
        lat_cells, speed_cells = [], []
        for b in batches:
            entry = r.latency.get(b)
            base = base_p50.get((r.runtime_label, b)) if r.variant != baseline else None
            slower = (f" **{entry.p50 / base:.2f}x {baseline}**" if entry is not None and base
                      and entry.provenance == "measured" and entry.p50 > SLOWER_MARGIN * base else "")
            lat_cells.append("-" if entry is None else f"{_fmt_s(entry.p50)} ({entry.provenance[:4]}){slower}")
            sp = r.speed.get(b)
            speed_cells.append("-" if sp is None else f"{sp.value:.4g} {sp.unit}")
        e = r.energy
        lines.append(
            f"| {r.variant} | {r.runtime_label} | {r.evaluation.value:.4f} | "
            f"{r.evaluation.value - ref.evaluation.value:+.4f} | {_fmt_bytes(r.size_bytes)} | "
            f"{'-' if r.bits_per_weight is None else format(r.bits_per_weight, '.2f')} | "
            f"{'-' if r.max_abs_diff is None else format(r.max_abs_diff, '.3g')} | "
            + " | ".join(lat_cells) + " | " + " | ".join(speed_cells)
            + f" | {_fmt_j(e.energy_j_per_sample)} | {e.provenance or '-'}"
            + (f": {e.method}" if e.method else "")
            + " |"
        )
    lines += _evaluation_detail(report.results)
    if report.failed_runs:
        lines += ["", "## Runs that failed (no figures for these)", "", "| variant | runtime | error |", "|---|---|---|"]
        for f in report.failed_runs:
            lines.append(f"| {f.variant} | {f.runtime_label} | {f.error.replace('|', '/')} |")
    # latency detail
    lines += ["", "## Latency detail", "",
              "| variant | runtime | batch | provenance | p50 | p90 | p99 | cv | n | peak RSS |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report.results:
        for b, entry in r.latency.items():
            lines.append(
                f"| {r.variant} | {r.runtime_label} | {b} | {entry.provenance} | {_fmt_s(entry.p50)} | "
                f"{_fmt_s(entry.p90)} | {_fmt_s(entry.p99)} | "
                f"{'-' if entry.cv is None else format(entry.cv, '.2f')} | {'-' if entry.n is None else entry.n} | "
                f"{_fmt_bytes(entry.peak_rss_bytes)} |"
            )
    exact = [r for r in report.results if r.bit_exact_reference]
    if exact:
        lines += ["", "## Check against the bit-exact reference model", "",
                  "| variant | runtime | reference | samples | max abs output difference | activity counts equal |",
                  "|---|---|---|---|---|---|"]
        for r in exact:
            e = r.bit_exact_reference
            lines.append(f"| {r.variant} | {r.runtime_label} | {e['runtime']} | {e['n_samples']} | "
                         f"{e['max_abs_diff']:g} | {'yes' if e['activity_equal'] else 'NO'} |")
    extra = [r for r in report.results if r.activity]
    if extra:
        lines += ["", f"## Neuromorphic activity (from the simulator's spikes, per {unit})", "",
                  "| variant | runtime | synaptic ops | neuron updates | messages | time steps |", "|---|---|---|---|---|---|"]
        for r in extra:
            a = r.activity
            lines.append(f"| {r.variant} | {r.runtime_label} | {a['synops']:.1f} | {a['neuron_updates']:.1f} | "
                         f"{a['messages']:.1f} | {a['timesteps']:.1f} |")
    lines += ood_markdown(report)
    # compression detail
    lines += ["", "## Compression passes", ""]
    for v in report.variants:
        for p in v.pass_reports:
            skipped = p.skipped_layers or []
            lines.append(
                f"- **{v.name}** / `{p.kind}`: {_fmt_bytes(p.size_before_bytes)} -> "
                f"{_fmt_bytes(p.size_after_bytes)}"
                + (f", {p.bits_per_weight:.2f} bits/weight" if p.bits_per_weight is not None else "")
                + _coverage(p.layers or [])
                + (f", skipped: {', '.join(skipped)}" if 0 < len(skipped) <= 4 else
                   f", skipped: {len(skipped)} layers (the table below names them)" if skipped else "")
                + f" ({p.seconds:.2f} s)"
            )
            for note in p.notes:
                lines.append(f"  - {note}")
            if p.layers:
                lines.append("")
                lines.append("  | layer | action | bits/weight | params | error |")
                lines.append("  |---|---|---|---|---|")
                for layer in p.layers:
                    err = ", ".join(f"{k}={v:.2f}" if isinstance(v, (int, float)) else f"{k}={v}"
                                    for k, v in layer.error.items())
                    where = f" (in {layer.graph})" if layer.graph else ""
                    lines.append(
                        f"  | {layer.name}{where} | {layer.action} | "
                        f"{'-' if layer.bits_per_weight is None else format(layer.bits_per_weight, '.2f')} | "
                        f"{'-' if layer.n_params is None else layer.n_params} | {err or layer.reason or '-'} |"
                    )
                lines.append("")
            sens = p.extra.get("sensitivity")
            if sens:
                lines += ["  Sensitivity (one layer quantized at a time):", "",
                          "  | layer | metric | Δ vs fp32 |", "  |---|---|---|"]
                for row in sens:
                    lines.append(f"  | {row['layer']} | {row['metric']:.4f} | {row['delta']:+.4f} |")
                lines.append("")
    # estimates' sources
    lines += ["", "## Where the figures come from", ""]
    lines.append(f"- Target `{report.target.name}`: cost model `{report.target.cost_model}`.")
    for c in report.target.coefficients:
        lines.append(f"  - {c.name} = {c.value:g} {c.unit} ({c.source})")
    for note in report.plan.notes + report.notes:
        lines.append(f"- {note}")
    if report.plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in report.plots]
    return "\n".join(lines) + "\n"


def plot_report(report: DeployReport | dict, folder: Path) -> list[str]:
    """Latency distributions, metric vs size, per-layer error. Returns the written file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = as_report(report)
    written = []
    metric = report.reference.evaluation.metric

    # latency distribution per (variant, runtime), one panel per batch size, measured figures only
    measured = [(r, b, e) for r in report.results for b, e in r.latency.items()
                if e.provenance == "measured" and e.samples_s]
    if measured:
        batches = sorted({b for _, b, _ in measured})
        fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 4), squeeze=False)
        for ax, b in zip(axes[0], batches):
            rows = [(r, e) for r, bb, e in measured if bb == b]
            data = [np.asarray(e.samples_s) * 1e3 for _, e in rows]
            ax.boxplot(data, orientation="horizontal", showfliers=True, whis=(1, 99))
            ax.set_yticks(range(1, len(rows) + 1), [f"{r.variant}\n{r.runtime_label}" for r, _ in rows], fontsize=8)
            ax.set_xscale("log")
            ax.set_xlabel("latency per call (ms, log scale); whiskers p1-p99")
            ax.set_title(f"batch {b} (measured)")
        fig.suptitle(f"{report.model} on {report.target.name}: latency distribution")
        fig.tight_layout()
        fig.savefig(folder / "latency.png", dpi=110)
        plt.close(fig)
        written.append("latency.png")

    # metric vs size on disk
    fig, ax = plt.subplots(figsize=(6, 4))
    ref = report.reference
    ax.scatter([ref.size_bytes / 1024], [ref.evaluation.value], marker="*", s=150, c="k",
               label=f"reference ({ref.runtime})")
    for r in report.results:
        ax.scatter([r.size_bytes / 1024], [r.evaluation.value], label=f"{r.variant} / {r.runtime_label}")
    ax.set_xlabel("size on disk (KiB)")
    ax.set_ylabel(metric)
    ax.set_title(f"{report.model} on {report.target.name}: {metric} vs size")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "metric_vs_size.png", dpi=110)
    plt.close(fig)
    written.append("metric_vs_size.png")

    # per-layer error of each quantizing pass
    layer_rows = []
    for v in report.variants:
        for p in v.pass_reports:
            for layer in p.layers:
                err = layer.error
                # a layer whose output the quantizer fused away (ReLU merged into a MatMul) has no output
                # SQNR: fall back to its weight SQNR rather than plotting a missing value
                key = next((k for k in ("output_sqnr_db", "weight_sqnr_db") if err.get(k) is not None), None)
                if key is not None:
                    layer_rows.append((f"{v.name}:{p.kind}", layer.name, key, err[key]))
    if layer_rows:
        groups = sorted({g for g, *_ in layer_rows})
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(layer_rows) + 1.5))
        y = np.arange(len(layer_rows))
        colors = {g: f"C{i}" for i, g in enumerate(groups)}
        ax.barh(y, [v for *_, v in layer_rows], color=[colors[g] for g, *_ in layer_rows])
        ax.set_yticks(y, [f"{g} {name} ({key.split('_')[0]})" for g, name, key, _ in layer_rows], fontsize=7)
        ax.set_xlabel("SQNR (dB, higher is better)")
        ax.set_title("per-layer quantization error")
        fig.tight_layout()
        fig.savefig(folder / "per_layer_error.png", dpi=110)
        plt.close(fig)
        written.append("per_layer_error.png")
    written += plot_ood(report, folder)
    return written


def ood_markdown(report: DeployReport | dict) -> list[str]:
    """The OOD-monitor section (bench.measure.ood_monitor): each score's AUROC and its shift against fp32. The
    section's own shape is the monitor's (``ood_entry``), read as it writes it."""
    report = as_report(report)
    ref = report.ood_reference
    rows = [r for r in report.results if r.ood]
    if not ref or not rows:
        return []
    sets = [k for k in ref["auroc"]["msp"] if k != "pooled"]
    scores = [k for k in ref["auroc"] if k != "oracle"]
    lines = ["", "## OOD scores (fp32 monitor vs compressed)", "",
             "AUROC of held-out ID inputs (positive) against each OOD set, scores from each runtime's outputs; "
             "KS = Kolmogorov-Smirnov distance to the torch fp32 scores on the same inputs; "
             "ID flagged = share of ID inputs below the fp32 threshold that keeps 95% of ID (0.05 if nothing moved).",
             "",
             "| variant | runtime | score | " + " | ".join(sets) + " | pooled | KS ID | KS OOD | mean shift ID | ID flagged |",
             "|" + "---|" * (8 + len(sets))]
    entries = [("torch fp32", "torch", ref)] + [(r.variant, r.runtime_label, r.ood) for r in rows]
    for variant, rt, e in entries:
        for s in scores:
            a = e["auroc"][s]
            sh = e.get("shift_vs_fp32", {}).get(s)
            lines.append(f"| {variant} | {rt} | {s} | " + " | ".join(f"{a[k]:.3f}" for k in sets) + f" | {a['pooled']:.3f} | "
                         + (f"{sh['ks_id']:.3f} | {sh['ks_ood']:.3f} | {sh['mean_shift_id']:+.3g}" if sh else "- | - | -")
                         + f" | {e['id_flag_rate_at_fp32_threshold'][s]:.3f} |")
        if "oracle" in e["auroc"]:
            lines.append(f"| {variant} | {rt} | oracle probe | " + " | ".join(f"{e['auroc']['oracle'][k]:.3f}" for k in sets)
                         + " | - | - | - | - | - |")
    return lines


def plot_ood(report: DeployReport | dict, folder: Path) -> list[str]:
    """One PNG: per score, ID and pooled-OOD score histograms of each run over the fp32 reference's."""
    report = as_report(report)
    ref = report.ood_reference
    rows = [r for r in report.results if r.ood]
    if not ref or not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = list(ref["hist"])
    fig, axes = plt.subplots(len(scores), len(rows), figsize=(3.2 * len(rows), 2.4 * len(scores)), squeeze=False)
    for i, s in enumerate(scores):
        edges = np.asarray(ref["hist"][s]["edges"])
        for j, r in enumerate(rows):
            ax = axes[i, j]
            for src, style in ((ref, {"ls": "--", "alpha": 0.6}), (r.ood, {})):
                h = src["hist"][s]
                for part, color in (("id", "C0"), ("ood", "C3")):
                    counts = np.asarray(h[part], dtype=float)
                    ax.stairs(counts / max(counts.sum(), 1), edges, **({"color": color} | style),
                              label=f"{'fp32' if src is ref else 'this'} {part.upper()}")
            ax.set_title(f"{s}: {r.variant} / {r.runtime_label}", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == 0 and j == 0:
                ax.legend(fontsize=6)
    fig.suptitle(f"{report.model}: OOD score distributions, this run (solid) vs torch fp32 (dashed); blue ID, red OOD")
    fig.tight_layout()
    fig.savefig(folder / "ood_scores.png", dpi=100)
    plt.close(fig)
    return ["ood_scores.png"]


def write_report(report: dict, folder: Path) -> None:
    """Write report.json, report.md and the plots into ``folder`` (a temporary folder of the caller)."""
    folder.mkdir(parents=True, exist_ok=True)
    report["plots"] = plot_report(report, folder)
    write_json(folder / "report.json", report)
    (folder / "report.md").write_text(render_markdown(report))


def _evaluation_detail(results: list[ResultRow], max_columns: int = 8) -> list[str]:
    """The producer's further scores per row (its evaluation's scalar ``extra`` figures, e.g. the denoiser's
    SI-SNR improvement and STOI); nothing when no row has any."""
    keys: list[str] = []
    for r in results:
        for k, v in r.evaluation.extra.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("n_") and k not in keys:
                keys.append(k)
    keys = keys[:max_columns]
    if not keys:
        return []
    lines = ["", "## Evaluation detail", "", "| variant | runtime | " + " | ".join(keys) + " |",
             "|---|---|" + "---|" * len(keys)]
    for r in results:
        extra = r.evaluation.extra
        cells = [format(extra[k], ".4g") if isinstance(extra.get(k), (int, float)) else "-" for k in keys]
        lines.append(f"| {r.variant} | {r.runtime_label} | " + " | ".join(cells) + " |")
    return lines
