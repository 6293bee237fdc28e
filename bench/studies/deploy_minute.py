"""Deploy in a minute: the default `edgesmith deploy` of real pretrained models, timed as a user runs it.

    python -m edgesmith.bench.studies.deploy_minute [--models vad cls det rec] [--out docs/results/pretrained] [--force]

Each fixture model (``pretrained_fixtures``: Silero VAD, PP-OCR's text-direction classifier, detector and recognizer,
as their wheels ship them) gets data made here and one `edgesmith deploy MODEL --target host-cpu` with nothing but its
data flags (and the VAD's sample rate pinned), in a fresh process, timed from start to exit. The table gives the wall
time against the 60 s goal, the variants built (and those not built or failed), each variant's score, and int8's p50
over fp32's at batch 1 in onnxruntime, all read from the deploy's own report. Writes table.json, table.md and
deploy_minute.png (wall time per model) into ``--out``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.bench.report.schema import DeployReport
from edgesmith.bench.studies.claim_io import claim_command, refuse_existing, save_png, write_claim
from edgesmith.bench.studies.pretrained_fixtures import ppocr, silero_vad, text_lines, text_pages, vad_sequences

GOAL_S = 60.0
MODULE = "edgesmith.bench.studies.deploy_minute"


def _data(name: str, folder: Path) -> tuple[Path, list[str]]:
    """(the model file, the deploy flags that give it its data) for fixture ``name``."""
    import onnx

    if name == "vad":
        x, y = vad_sequences(16, 40, seed=0)
        np.savez(folder / "cal.npz", input=x[:6])
        np.savez(folder / "eval.npz", input=x[6:])
        np.save(folder / "labels.npy", y[6:])
        return silero_vad(), ["--model-option", "const=sr:16000", "--calibration-data", str(folder / "cal.npz"),
                              "--eval-data", str(folder / "eval.npz"), "--labels", str(folder / "labels.npy"),
                              "--metric", "binary"]
    model = ppocr(name)
    input_name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    if name == "cls":
        x, y = text_lines(96, seed=0)
        np.save(folder / "cal.npy", x[:32])
        np.savez(folder / "eval.npz", **{input_name: x[32:], "labels": y[32:]})
    elif name == "rec":
        x, _ = text_lines(64, seed=0, width=320, flip=False)
        np.save(folder / "cal.npy", x[:32])
        np.save(folder / "eval.npy", x[32:])
    else:
        x = text_pages(16, seed=0)
        np.save(folder / "cal.npy", x[:8])
        np.save(folder / "eval.npy", x[8:])
    ev = folder / ("eval.npz" if name == "cls" else "eval.npy")
    return model, ["--calibration-data", str(folder / "cal.npy"), "--eval-data", str(ev)]


def deploy_one(name: str, work: Path) -> dict:
    folder = work / name
    folder.mkdir()
    model, flags = _data(name, folder)
    argv = [sys.executable, "-m", "edgesmith.bench.cli", "deploy", str(model), "--target", "host-cpu",
            "--out", str(folder / "report"), "--quiet", *flags]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    row = {"model": name, "file": model.name, "size_mb": round(model.stat().st_size / 2 ** 20, 2),
           "wall_s": round(wall, 1), "exit": done.returncode,
           "command": "edgesmith deploy " + " ".join([model.name, "--target", "host-cpu", *[
               Path(f).name if os.sep in f else f for f in flags]])}
    if done.returncode != 0:
        row["error"] = (done.stderr.strip().splitlines() or ["(no output)"])[0]
        return row
    report = DeployReport.load(folder / "report" / "report.json")
    row["metric"] = report.results[0].evaluation.metric if report.results else None
    row["variants"] = {f"{r.variant}/{r.runtime}": round(r.evaluation.value, 4) for r in report.results}
    row["failed"] = [f"{f.variant}/{f.runtime_label}" for f in report.failed_runs]
    row["not_built"] = sorted(report.plan.not_built)
    fp32, int8 = report.row("fp32", "onnxruntime"), report.row("int8", "onnxruntime")
    if fp32 and int8 and 1 in fp32.latency and 1 in int8.latency:
        row["int8_over_fp32_p50_b1"] = round(int8.latency[1].p50 / fp32.latency[1].p50, 2)
    return row


def markdown(result: dict) -> str:
    lines = [f"# Default deploy of real pretrained models on host-cpu (goal: {GOAL_S:.0f} s)", "",
             f"{result['machine']}; {result['date']}; `{result['command']}`", "",
             "| model | size | wall | within goal | metric | scores (variant/runtime) | int8/fp32 p50 b=1 | not built | failed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        scores = ", ".join(f"{k} {v:.4g}" for k, v in (r.get("variants") or {}).items()) or r.get("error", "")
        lines.append(f"| {r['model']} ({r['file']}) | {r['size_mb']} MB | {r['wall_s']} s | "
                     f"{'yes' if r['exit'] == 0 and r['wall_s'] <= GOAL_S else 'no'} | {r.get('metric') or '-'} | "
                     f"{scores} | {r.get('int8_over_fp32_p50_b1', '-')} | {', '.join(r.get('not_built', [])) or '-'} | "
                     f"{', '.join(r.get('failed', [])) or '-'} |")
    lines += ["", "Each deploy: one fresh `python -m edgesmith.bench.cli deploy` process, wall time from its start to its "
              "exit (imports, data checks, every variant built, scored and timed, the report written). Commands:", ""]
    lines += [f"- {r['model']}: `{r['command']}`" for r in result["rows"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["vad", "cls", "det", "rec"], choices=["vad", "cls", "det", "rec"])
    ap.add_argument("--out", type=Path, default=Path("docs/results/pretrained"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    refuse_existing(args.out, args.force)
    from edgesmith.hardware.host_cpu import cpu_identity

    cpu = cpu_identity()
    rows = []
    with tempfile.TemporaryDirectory(prefix="deploy-minute.") as work:
        for name in args.models:
            print(f"[deploy_minute] {name} ...", flush=True)
            rows.append(deploy_one(name, Path(work)))
            print(f"[deploy_minute] {name}: {rows[-1]['wall_s']} s, exit {rows[-1]['exit']}", flush=True)
    result = {"machine": f"{cpu['model_name']}, {cpu['logical_cpus']} logical CPUs",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": claim_command(MODULE, argv),
              "goal_s": GOAL_S, "rows": rows}

    def draw(folder: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.barh([r["model"] for r in rows], [r["wall_s"] for r in rows],
                color=["tab:green" if r["exit"] == 0 and r["wall_s"] <= GOAL_S else "tab:red" for r in rows])
        ax.axvline(GOAL_S, color="k", linestyle="--", label=f"goal {GOAL_S:.0f} s")
        ax.set_xlabel("default deploy wall time on host-cpu (s, measured)")
        ax.legend()
        fig.tight_layout()
        save_png(fig, folder / "deploy_minute.png")
        return ["deploy_minute.png"]

    print(write_claim(args.out, args.force, result, markdown, draw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
