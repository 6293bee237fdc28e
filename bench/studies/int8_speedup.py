"""fp32 vs int8 QDQ vs int4 MatMulNBits on onnxruntime: p50 latency per batch, each in a fresh process.

    python -m edgesmith.bench.studies.int8_speedup [--batch 1 64] [--threads 2] [--rounds 3] [--out results.json]

Builds ``digits-wide`` (three 1024-wide hidden layers, so the time goes into MatMul), exports it to
ONNX and quantizes it, then measures every (precision, batch) with ``measure_isolated``: one Python
process per artifact and measurement. ``--rounds`` repeats the whole set in rotated order and
reports the median p50 over rounds, which damps the noise of a machine shared with other work.
Prints a Markdown table with the speed-up of each precision over fp32, from the median p50 and from
the fastest call (contention from other processes only ever adds time, so on a busy machine the
minimum is the steadier estimate of what the kernels cost).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from edgesmith.bench.measure.latency import IsolatedResult, measure_isolated
from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.export_onnx import ExportOnnxConfig
from edgesmith.compress.quant_int4 import Int4WeightOnlyConfig
from edgesmith.compress.quant_int8 import Int8QdqConfig
from edgesmith.models import get_producer
from edgesmith.common import write_json

PRECISIONS = ("fp32", "int8", "int4")
MODEL = "digits-wide"


def build_precision_variants(producer, workdir: Path) -> dict[str, Artifact]:
    """fp32 ONNX export of ``producer`` plus its int8 QDQ and int4 weight-only versions (default configs)."""
    torch_art = Artifact("torch", module=producer.module, meta={"input_shape": list(producer.input_shape)})

    def ctx(sub: str) -> PassContext:
        return PassContext(workdir=workdir / sub, calibration=producer.calibration_data(),
                           example_input=producer.example_inputs(1), seed=producer.seed, progress=False)

    fp32, _ = run_passes(torch_art, [ExportOnnxConfig()], ctx("fp32"))
    int8, _ = run_passes(fp32, [Int8QdqConfig()], ctx("int8"))
    int4, _ = run_passes(fp32, [Int4WeightOnlyConfig()], ctx("int4"))
    return {"fp32": fp32, "int8": int8, "int4": int4}


def measure_all(variants: dict[str, Artifact], producer, *, batches, threads: int, warmup: int, reps: int,
                rounds: int, progress=print) -> dict[tuple[str, int], list[IsolatedResult]]:
    """Every (precision, batch) ``rounds`` times, each in its own process, order rotated per round."""
    results: dict[tuple[str, int], list[IsolatedResult]] = {}
    names = list(variants)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for batch in batches:
            x = producer.example_inputs(batch)
            for name in order:
                res = measure_isolated("onnxruntime", variants[name], x, threads=threads, warmup=warmup, reps=reps)
                results.setdefault((name, batch), []).append(res)
                progress(f"round {r + 1}/{rounds} batch {batch:>3} {name}: p50 {res.latency.p50 * 1e3:.4f} ms")
    return results


def summarize(results: dict[tuple[str, int], list[IsolatedResult]], batches) -> list[dict]:
    """One row per (batch, precision): median p50 over rounds, its range, and speed-up over fp32."""
    rows = []
    for batch in batches:
        base = statistics.median(r.latency.p50 for r in results[("fp32", batch)])
        base_min = min(r.latency.min for r in results[("fp32", batch)])
        for name in PRECISIONS:
            runs = results.get((name, batch))
            if not runs:
                continue
            p50s = [r.latency.p50 for r in runs]
            p50, fastest = statistics.median(p50s), min(r.latency.min for r in runs)
            rows.append({
                "batch": batch, "precision": name, "p50_s": p50, "p50_min_s": min(p50s), "p50_max_s": max(p50s),
                "p90_s": statistics.median(r.latency.p90 for r in runs),
                "cv": statistics.median(r.latency.cv for r in runs),
                "min_s": fastest, "speedup_vs_fp32": base / p50, "time_ratio_vs_fp32": p50 / base,
                "speedup_vs_fp32_min": base_min / fastest,
                "size_bytes": runs[0].memory.artifact_size_bytes,
                "peak_rss_bytes": max(r.memory.peak_rss_bytes for r in runs),
                "load_cost_bytes": statistics.median(r.memory.load_cost_bytes for r in runs),
                "rounds": len(runs), "n_per_round": runs[0].latency.n, "threads": runs[0].latency.threads,
                "method": runs[0].latency.method,
            })
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = ["| batch | precision | p50 (ms) | p50 range over rounds (ms) | p90 (ms) | speed-up vs fp32 (p50) "
             "| min (ms) | speed-up (min) | size (KiB) | peak RSS (MiB) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['precision']} | {r['p50_s'] * 1e3:.4f} | "
                     f"{r['p50_min_s'] * 1e3:.4f}-{r['p50_max_s'] * 1e3:.4f} | {r['p90_s'] * 1e3:.4f} | "
                     f"{r['speedup_vs_fp32']:.2f}x | {r['min_s'] * 1e3:.4f} | {r['speedup_vs_fp32_min']:.2f}x | "
                     f"{r['size_bytes'] / 1024:.0f} | {r['peak_rss_bytes'] / 2**20:.0f} |")
    return "\n".join(lines)


def _environment(threads: int) -> str:
    import onnxruntime

    return (f"{MODEL} on onnxruntime {onnxruntime.__version__} (CPUExecutionProvider), {threads} threads, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgesmith.bench.studies.int8_speedup", description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64], help="batch sizes (default 1 64)")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads (default 2)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed calls per measurement (default 20)")
    ap.add_argument("--reps", type=int, default=200, help="timed calls per measurement (default 200)")
    ap.add_argument("--rounds", type=int, default=3, help="fresh-process repeats of the whole set (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="training seed of the model (default 0)")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = ap.parse_args(argv)
    if min(args.rounds, args.reps, args.threads, *args.batch) < 1 or args.warmup < 0:
        ap.error("--rounds, --reps, --threads and every --batch must be at least 1; --warmup at least 0")
    if args.out and args.out.exists() and not args.force:
        ap.error(f"{args.out} already exists; pass --force to replace it or choose another --out")

    def log(msg: str) -> None:  # progress goes to stderr: stdout is the table alone
        print(msg, file=sys.stderr, flush=True)

    log(f"building {MODEL} (seed {args.seed}) and its fp32 / int8 / int4 ONNX models ...")
    producer = get_producer(MODEL, seed=args.seed).build()
    with tempfile.TemporaryDirectory(prefix="edgesmith-int8-speedup-") as tmp:
        variants = build_precision_variants(producer, Path(tmp))
        results = measure_all(variants, producer, batches=args.batch, threads=args.threads, warmup=args.warmup,
                              reps=args.reps, rounds=args.rounds, progress=log)
    rows = summarize(results, args.batch)
    print(f"{_environment(args.threads)}; median of {args.rounds} fresh-process rounds of {args.reps} timed calls "
          f"after {args.warmup} warm-up calls ({rows[0]['method']}).\n")
    print(markdown_table(rows))
    if args.out:
        write_json(args.out, {"environment": _environment(args.threads), "rows": rows}, force=args.force)
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
