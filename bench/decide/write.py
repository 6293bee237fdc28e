"""What a goal-driven deploy writes beside its report: ``decision.json``, ``decision.md``, ``decision.png`` and
``chosen/`` (the artifact to ship, with ``chosen.json`` saying what it is and how it was chosen)."""
from __future__ import annotations

import shutil
from pathlib import Path

from edgesmith.common import write_json

COST_WORDS = {"latency": ("p50 latency", 1e3, "ms"), "energy": ("energy per sample", 1e3, "mJ"),
              "size": ("size on disk", 1 / 2**20, "MiB"), "memory": ("peak memory", 1 / 2**20, "MiB")}


def _fmt(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def summary(decision: dict) -> str:
    """The one line the terminal and the report's head give."""
    words, scale, unit = COST_WORDS[decision["goal"]["objective"]]
    c = decision["chosen"]
    if c is None:
        return "no candidate could be chosen (no row has a figure for the objective)"
    line = (f"chose {c['variant']} on {c['runtime']}: {decision['metric']} {_fmt(c['held_out'])} on held-out data "
            f"(reference {_fmt(decision['reference']['held_out'])}), {words} {_fmt(c['cost'] * scale)} {unit}"
            + (f" ({c['over_baseline']:.2f}x {decision.get('baseline', 'fp32')})" if c.get("over_baseline") else "")
            + (f", {len(c['restored'])} layer(s) restored" if c["restored"] else ""))
    if c["verdict"].startswith("chosen: no compressed"):
        miss = decision["closest_miss"]
        line += ("; " + c["verdict"].partition(": ")[2] + f" ({decision['budget']}"
                 + (f"; closest miss: {miss['variant']} on {miss['runtime']} at {_fmt(miss['validation'])} on validation"
                    if miss else "") + ")")
    return line


def markdown(decision: dict) -> str:
    words, scale, unit = COST_WORDS[decision["goal"]["objective"]]
    lines = ["# Decision", "", f"**{summary(decision)}**", "",
             f"- budget: {decision['budget']}, checked on the validation part; objective: {words}"
             + ("" if decision["goal"]["objective"] == "size" else f" at batch {decision['goal']['batch']}"),
             f"- evaluation data: {decision['split']}",
             f"- the reference model's (fp32) {decision['metric']}: {_fmt(decision['reference']['validation'])} on validation, "
             f"{_fmt(decision['reference']['held_out'])} held out",
             f"- search: {decision['search_s']:.1f} s",
             *[f"- **warning**: {w}" for w in decision.get("warnings", [])]]
    if decision.get("paired_timing"):
        lines.append(f"- latency of the candidates within budget: {decision['paired_timing']['method']}")
    lines += ["", f"| variant | runtime | validation | held out | drop | {words} ({unit}) | provenance | "
              f"vs {decision.get('baseline', 'fp32')} | "
              "restored layers | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in decision["candidates"]:
        vs = f"{c['over_baseline']:.3f}x" if c["over_baseline"] else "-"
        lines.append(f"| {c['variant']} | {c['runtime']} | {_fmt(c['validation'])} | {_fmt(c['held_out'])} | "
                     f"{_fmt(c['drop'], 3)} | {_fmt(None if c['cost'] is None else c['cost'] * scale)} | "
                     f"{c['cost_provenance']} | {vs} | {len(c['restored']) or '-'} | {c['verdict']} |")
    if decision.get("qat"):
        lines += ["", f"QAT (asked for with --allow-qat): {decision['qat']['outcome']}"]
    if decision["restore_search"]:
        lines += ["", "## Layers restored", ""]
        for s in decision["restore_search"]:
            lines.append(f"- {s['variant']} on {s['runtime']}: {s['outcome']}"
                         + (f" ({', '.join(s['layers'])})" if s.get("layers") else "")
                         + ("; rebuilds: " + ", ".join(f"k={p['k']} -> {_fmt(p['validation'])}" for p in s["probes"])
                            if s.get("probes") else ""))
    return "\n".join(lines) + "\n"


def plot(decision: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    words, scale, unit = COST_WORDS[decision["goal"]["objective"]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for c in decision["candidates"]:
        if c["cost"] is None or c["validation"] is None:
            continue
        colour = "tab:green" if c["verdict"].startswith("chosen") else (
            "tab:blue" if c["verdict"] == "within budget" else "tab:red")
        ax.scatter(c["cost"] * scale, c["validation"], color=colour, s=60 if c["verdict"].startswith("chosen") else 25,
                   marker="*" if c["verdict"].startswith("chosen") else "o")
        ax.annotate(f"{c['variant']} ({c['runtime']})", (c["cost"] * scale, c["validation"]), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
    goal, ref = decision["goal"], decision["reference"]["validation"]
    if goal["min_sqnr"] is not None:
        line = goal["min_sqnr"]
    else:
        allowed = goal["max_drop"] * abs(ref) if goal["relative"] else goal["max_drop"]
        line = ref - allowed if decision["higher_is_better"] else ref + allowed
    ax.axhline(line, color="k", linestyle="--", linewidth=0.8, label=f"budget ({decision['budget']})")
    ax.set_xlabel(f"{words} ({unit}), batch {goal['batch']}")
    ax.set_ylabel(f"{decision['metric']} on the validation part")
    ax.set_title("candidates: green star chosen, blue within budget, red rejected", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)  # into the deploy's temporary folder, renamed into place with the report
    plt.close(fig)


def write_decision(decision: dict, folder: Path, artifacts: dict, passes: dict) -> None:
    """Into a deploy's (temporary) report ``folder``: the decision files, and ``chosen/`` with a copy of the chosen
    row's artifact (``artifacts``: variant -> Artifact) and ``chosen.json`` (its passes from ``passes``)."""
    write_json(folder / "decision.json", decision)
    (folder / "decision.md").write_text(markdown(decision))
    plot(decision, folder / "decision.png")
    c = decision["chosen"]
    if c is None:
        return
    chosen = folder / "chosen"
    chosen.mkdir()
    art = artifacts.get(c["variant"])
    files = []
    if art is not None and art.path is not None and Path(art.path).exists():
        src = Path(art.path)
        dst = chosen / src.name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
        files.append(dst.name)
    write_json(chosen / "chosen.json", {
        "variant": c["variant"], "runtime": c["runtime"], "files": files,
        "format": None if art is None else art.format, "passes": passes.get(c["variant"], []),
        "restored_layers": c["restored"], "metric": decision["metric"],
        "validation": c["validation"], "held_out": c["held_out"], "cost": c["cost"],
        "cost_provenance": c["cost_provenance"], "goal": decision["goal"], "why": c["verdict"],
        "run_it": (f"edgesmith bench chosen/{files[0]} --runtime {c['runtime'].split(' ')[0]}"
                   if files and art is not None and art.format == "onnx" else None)})
