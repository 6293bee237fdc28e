"""Training-step time of the reference RWKV models: the chunked WKV against the token-by-token one.

    python -m edgesmith.bench.studies.rwkv_train_speed [--versions 6 7] [--size large] [--batch 8] \
        [--steps 5] [--warmup 1] [--device cpu] [--threads 0] [--out-dir docs/results/rwkv_train_speed]

For each version, two copies of the same seeded model (the preset's layers, width, heads and window length)
train on the same batches of the stdlib text with the trainer's own step (``train.train_step``: forward,
cross-entropy, backward, clipping, AdamW): one runs the sequence form the trainer uses (RWKV-6 and RWKV-7 in
chunks of 16 tokens), the other the same model with ``recurrent=True`` (the WKV one token at a time, the
decode cell). The two step in turn, so a slow spell of a shared machine hits both. Per form: the median and
the best of the timed steps (wall clock, ``perf_counter``, the device synchronized around each step:
MEASURED), tokens/s, and the losses, which must agree to rounding (same weights, same data; the rounding
differences grow step by step, as training amplifies them).

The time a full preset run would take (``--project-steps``) is the median step time times that number: an
ESTIMATE from this run's measurement (data loading, logging and the final evaluation are not in it).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.rwkv.checkpoint import build_model
from edgesmith.models.rwkv.data import load_splits
from edgesmith.models.rwkv.train import SIZES, TrainSettings, make_optimizer, random_windows, timed_train_step

FORMS = {"chunked": False, "token-by-token": True}  # form -> the ``recurrent`` flag of the forward


def time_version(settings: TrainSettings, steps: int, warmup: int, log=print) -> dict:
    """Both forms of one version, stepped in turn on the same batches; per-form step times and losses."""
    device = torch.device(settings.device)
    torch.manual_seed(settings.seed)
    base = build_model(settings.model_config())
    models = {f: copy.deepcopy(base).to(device).train() for f in FORMS}
    opts = {f: make_optimizer(m, settings) for f, m in models.items()}
    train_text = load_splits().train
    rng = np.random.default_rng(settings.seed)
    times = {f: [] for f in FORMS}
    losses = {f: [] for f in FORMS}
    t_start = time.perf_counter()
    for i in range(warmup + steps):
        x = random_windows(train_text, rng, settings, device)
        for form, recurrent in FORMS.items():
            loss, seconds = timed_train_step(models[form], opts[form], x, recurrent=recurrent)
            if i >= warmup:
                times[form].append(seconds)
            losses[form].append(loss)
        el = time.perf_counter() - t_start
        log(f"  rwkv{settings.version} step {i + 1}/{warmup + steps} ({'warm-up' if i < warmup else 'timed'})  "
            + "  ".join(f"{f} {times[f][-1] if times[f] else float('nan'):.3f}s" for f in FORMS)
            + f"  {el:.0f}s elapsed, ETA {el / (i + 1) * (warmup + steps - i - 1):.0f}s")
    forms = {}
    tokens = settings.batch * settings.seq_len
    for form in FORMS:
        med = statistics.median(times[form])
        forms[form] = {"step_seconds": times[form], "median_s": med, "best_s": min(times[form]),
                       "tokens_per_s": tokens / med, "losses": losses[form]}
    gap = max(abs(a - b) for a, b in zip(losses["chunked"], losses["token-by-token"]))
    return {"version": settings.version, "forms": forms, "max_loss_gap": gap,
            "speedup": forms["token-by-token"]["median_s"] / forms["chunked"]["median_s"],
            "paired_speedups": [t / c for t, c in zip(forms["token-by-token"]["step_seconds"],
                                                      forms["chunked"]["step_seconds"])]}


def markdown(payload: dict) -> str:
    s = payload["settings"]
    lines = [f"# RWKV training-step time: chunked WKV vs token by token ({payload['date']})", "",
             f"Preset `{payload['size']}`: {s['n_layer']} layers x {s['n_embd']}, head {s['head_size']}, "
             f"windows of {s['seq_len']} tokens, batch {s['batch']}, device `{payload['device']}`, "
             f"{payload['threads']} torch threads; {payload['steps']} timed steps after {payload['warmup']} warm-up, "
             "the two forms in turn on the same batches.", "",
             "Step times are MEASURED (wall clock, device synchronized). The preset-run column is ESTIMATED: "
             f"median step time x {payload['project_steps']} steps, nothing else counted.", "",
             "| model | form | median s/step | best s/step | tokens/s | "
             f"{payload['project_steps']}-step run (estimated) | speedup (median; paired min-max) | "
             "max loss gap |", "|---|---|---|---|---|---|---|---|"]
    for r in payload["results"]:
        for form, f in r["forms"].items():
            sp = (f"{r['speedup']:.2f}x ({min(r['paired_speedups']):.2f}-{max(r['paired_speedups']):.2f})"
                  if form == "chunked" else "")
            gap = f"{r['max_loss_gap']:.1e}" if form == "chunked" else ""
            lines.append(f"| rwkv{r['version']} | {form} | {f['median_s']:.3f} | {f['best_s']:.3f} | "
                         f"{f['tokens_per_s']:.0f} | {f['median_s'] * payload['project_steps'] / 60:.1f} min | "
                         f"{sp} | {gap} |")
    return "\n".join(lines) + "\n"


def plot(payload: dict):
    from edgesmith.bench.studies.rwkv_quant_table import model_axes

    fig, axes = model_axes(len(payload["results"]))
    for ax, r in zip(axes, payload["results"]):
        for i, (form, f) in enumerate(r["forms"].items()):
            ax.plot(range(1, len(f["step_seconds"]) + 1), f["step_seconds"], marker="o", color=f"C{i}", label=form)
        ax.set_title(f"rwkv{r['version']}: training step (measured)")
        ax.set_xlabel("timed step"), ax.set_ylabel("seconds"), ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    return fig


def main(argv=None) -> int:
    from edgesmith.bench.studies.rwkv_quant_table import write_outputs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", type=int, nargs="+", choices=(6, 7), default=[6, 7])
    ap.add_argument("--size", choices=sorted(SIZES), default="large")
    ap.add_argument("--batch", type=int, default=None, help="default: the preset's on cuda, 8 on a CPU")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per form")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per form first")
    ap.add_argument("--project-steps", type=int, default=5000, help="the run length the estimate column is for")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads on a CPU; 0 = all cores")
    ap.add_argument("--out-dir", type=Path, default=Path("runs/rwkv_train_speed"))
    a = ap.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        raise SystemExit("--steps must be at least 1 and --warmup at least 0.")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {a.device}: this torch build sees no CUDA device; use --device cpu.")
    if a.threads:
        torch.set_num_threads(a.threads)
    preset = dict(SIZES[a.size])
    if a.batch is not None or not a.device.startswith("cuda"):
        preset["batch"] = a.batch or 8
    results = []
    try:
        for v in a.versions:
            settings = TrainSettings(**{**preset, "version": v, "device": a.device})
            results.append(time_version(settings, a.steps, a.warmup))
    except EdgesmithError as e:
        raise SystemExit(str(e)) from None
    device_name = torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else "cpu"
    payload = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "size": a.size,
               "settings": {k: getattr(settings, k) for k in ("n_layer", "n_embd", "head_size", "seq_len", "batch")},
               "device": device_name, "threads": torch.get_num_threads(), "steps": a.steps, "warmup": a.warmup,
               "project_steps": a.project_steps, "provenance": "step times measured (perf_counter, synchronized); "
               "run-length column estimated (median step x steps)", "results": results, "torch": torch.__version__}
    md = markdown(payload)
    write_outputs(a.out_dir, "_".join(f"rwkv{r['version']}" for r in results), payload, md, plot(payload),
                  "train_speed")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
