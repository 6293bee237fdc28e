"""``edgesmith deploy MODEL --target T``: run a target's whole plan and write a report folder.

For every variant of the plan: run its passes, load the result in each runtime, score it with the
producer's metric, compare its outputs with the torch fp32 reference, measure latency where the
target is this machine (fresh process per artifact) or estimate it from the target's cost model, and
label energy measured or estimated. Everything lands in a temporary folder that is renamed into place
at the end, so an interrupted deploy leaves nothing half-written.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from edgesmith.bench.energy import RaplReader, energy_figure
from edgesmith.bench.latency import measure_isolated
from edgesmith.bench.ood_monitor import ood_entry, ood_reference
from edgesmith.bench.report import write_report
from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.calibration_select import check_selector, select_calibration
from edgesmith.hardware import PlanOptions, Workload, get_target
from edgesmith.hardware.workload import workload_from_activity, workload_from_module, workload_from_onnx
from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.runtimes import RunResult, get_runtime

__version__ = "0.1.0"


@dataclass
class DeployOptions:
    model: str
    target: str
    out: Path
    force: bool = False
    seed: int = 0
    threads: int = 0  # 0: all cores of this machine
    batch_sizes: tuple[int, ...] = (1, 64)
    warmup: int = 20
    reps: int = 200
    n_calibration: int = 128
    calibration_select: str = "first"  # how the calibration samples are chosen: compress.calibration_select
    sensitivity: bool = False
    progress: bool = True
    plan: PlanOptions = field(default_factory=PlanOptions)
    model_options: dict = field(default_factory=dict)  # keyword arguments of the producer (e.g. tiny=True)

    def __post_init__(self):
        self.out = Path(self.out)
        check_selector(self.calibration_select)
        if not self.batch_sizes or any(int(b) < 1 for b in self.batch_sizes):
            raise EdgesmithError(f"batch sizes {self.batch_sizes} are not all positive.", "use e.g. --batch 1 --batch 64.")
        if self.reps < 5:
            raise EdgesmithError(f"--reps {self.reps} is too few for percentiles.", "use at least 5 repetitions.")
        if self.threads < 0:
            raise EdgesmithError("--threads must be 0 (all cores) or positive.", "pass a positive thread count.")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        return d


def environment() -> dict:
    """What the figures were measured on."""
    import onnxruntime
    import torch

    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    env = {"edgesmith": __version__, "python": platform.python_version(), "cpu": cpu, "cpu_count": os.cpu_count(),
           "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "platform": platform.platform()}
    try:
        import tvm

        env["tvm"] = tvm.__version__
    except Exception:  # TVM is optional at report time: its absence only removes a version string
        pass
    return env


def _runtime_rows(variant, plan_options: PlanOptions) -> list[tuple[str, str, dict]]:
    """(runtime name, label, options) for each runtime of a variant; TVM also tuned when asked."""
    rows = []
    for name in variant.runtimes:
        if name == "tvm":
            rows.append(("tvm", "tvm (untuned)", {"tune_trials": 0}))
            if plan_options.tvm_tune_trials > 0:
                n = plan_options.tvm_tune_trials
                rows.append(("tvm", f"tvm (tuned, {n} trials)", {"tune_trials": n}))
        else:
            rows.append((name, name, {}))
    return rows


def _workload(art: Artifact, producer, activity: dict | None) -> Workload:
    """Per-sample operation counts: from simulator activity when there is some, else from the graph."""
    if activity is not None:
        return workload_from_activity(activity, weight_bytes=art.size_bytes())
    if art.format == "onnx":
        return workload_from_onnx(art.path)
    return workload_from_module(art.module, producer.input_shape)


def deploy(opts: DeployOptions) -> Path:
    """Run the plan of ``opts.target`` for ``opts.model``; returns the report folder."""
    if opts.out.exists() and not opts.force:
        raise EdgesmithError(f"output folder {opts.out} already exists.", "choose another --out or pass --force to replace it.")
    target = get_target(opts.target)
    producer = get_producer(opts.model, seed=opts.seed, **opts.model_options)
    threads = opts.threads or os.cpu_count() or 1
    say = (lambda msg: tqdm.write(msg)) if opts.progress else (lambda msg: None)

    say(f"[edgesmith] building {opts.model} (seed {opts.seed})")
    producer.build()
    plan = target.plan(producer, opts.plan)
    ref_art = Artifact("torch", module=producer.module, meta={"input_shape": list(producer.input_shape)})
    torch_rt = get_runtime("torch", threads=threads).load(ref_art)
    ref_eval = producer.evaluate(lambda x: torch_rt.run(x).outputs)
    probe = producer.example_inputs(16)
    ref_out = torch_rt.run(probe).outputs
    ood_ref = ood_reference(producer, lambda x: torch_rt.run(x).outputs, seed=opts.seed)  # None: no OOD inputs

    # one calibration set for every variant: the influence selector runs the fp32 model over its pool
    calibration = select_calibration(producer, opts.n_calibration, opts.calibration_select, seed=opts.seed)

    with atomic_path(opts.out, force=opts.force) as tmp:
        tmp.mkdir(parents=True)
        results, variants, failed = [], [], []
        steps = [(v, rt) for v in plan.variants for rt in _runtime_rows(v, opts.plan)]
        bar = tqdm(total=len(steps), desc="deploy", unit="run", disable=not opts.progress)
        for variant in plan.variants:
            bar.set_postfix_str(f"{variant.name}: passes")
            ctx = PassContext(workdir=tmp / "artifacts" / variant.name,
                              calibration=calibration,
                              example_input=producer.example_inputs(1), seed=opts.seed,
                              sensitivity=opts.sensitivity, progress=opts.progress,
                              evaluate=_artifact_scorer(producer, threads))
            art, reports = run_passes(ref_art, variant.passes, ctx)
            target.check_fits(art.size_bytes(), f"variant {variant.name}")
            variants.append({**variant.to_dict(), "artifact": str(art.path.relative_to(tmp)) if art.path else None,
                             "pass_reports": [r.to_dict() for r in reports]})
            bpw = next((r.bits_per_weight for r in reversed(reports) if r.bits_per_weight is not None), None)
            for rt_name, label, rt_opts in _runtime_rows(variant, opts.plan):
                bar.set_postfix_str(f"{variant.name}: {label}")
                try:
                    results.append(_run_variant(target, producer, art, variant.name, rt_name, label, rt_opts,
                                                threads, opts, ref_out, probe, bpw, ood_ref=ood_ref))
                except Exception as e:
                    # the target's own runtime must work; an optional second backend (TVM) that cannot
                    # compile this model is recorded as a failed run instead of losing every other figure
                    if rt_name == target.runtime:
                        raise
                    failed.append({"variant": variant.name, "runtime": rt_name, "runtime_label": label,
                                   "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"})
                    say(f"[edgesmith] {variant.name} on {label} failed: {failed[-1]['error']}")
                bar.update(1)
        bar.close()
        report = {
            "model": opts.model,
            "target": target.describe(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "seed": opts.seed,
            "threads": threads,
            "batch_sizes": list(opts.batch_sizes),
            "options": opts.to_dict(),
            "environment": environment(),
            "plan": plan.to_dict(),
            "latency_method": _latency_method(target, opts),
            "reference": {"runtime": "torch", "evaluation": ref_eval.to_dict(), "size_bytes": ref_art.size_bytes()},
            "ood_reference": None if ood_ref is None else ood_ref.entry,
            "variants": variants,
            "results": results,
            "failed_runs": failed,
            "notes": list(producer.report_notes()),
        }
        write_report(report, tmp)
    say(f"[edgesmith] report written to {opts.out}/report.md")
    return opts.out


def _latency_method(target, opts: DeployOptions) -> str:
    if target.latency_provenance == "measured":
        return (f"measured: {opts.warmup} warm-up + {opts.reps} timed calls per batch size, "
                "perf_counter around run(), one fresh process per artifact")
    return f"estimated with the {target.cost_model.name} cost model (no {target.name} on this machine)"


def _artifact_scorer(producer, threads: int):
    """A metric function over ONNX artifacts, used by passes for the per-layer sensitivity table."""

    def score(art: Artifact) -> float:
        rt = get_runtime("onnxruntime", threads=threads).load(art)
        return producer.evaluate(lambda x: rt.run(x).outputs).value

    return score


def _run_variant(target, producer, art, variant_name, rt_name, label, rt_opts, threads, opts, ref_out, probe, bpw,
                 ood_ref=None) -> dict:
    rt = get_runtime(rt_name, threads=threads, **rt_opts).load(art)
    seen: dict = {}
    # backends that compile per input shape (TVM) evaluate in chunks of the largest timed batch, padded,
    # so evaluation reuses the kernels compiled (and tuned) for timing instead of building one more
    chunk = max(opts.batch_sizes) if rt_name == "tvm" else None

    def predict(x):
        res = rt.run(x) if chunk is None else _run_chunked(rt, x, chunk)
        seen.update(inputs=x, outputs=res.outputs, stats=res.stats)
        return res.outputs

    ev = producer.evaluate(predict)
    eval_stats = dict(seen["stats"])
    out = rt.run(probe).outputs
    row = {
        "variant": variant_name,
        "runtime": rt_name,
        "runtime_label": label,
        "runtime_options": rt_opts,
        "evaluation": ev.to_dict(),
        "size_bytes": art.size_bytes(),
        "bits_per_weight": bpw,
        "max_abs_diff": float(np.max(np.abs(out - ref_out))),
        "latency": {},
    }
    if ood_ref is not None:  # OOD scores of this variant vs the fp32 monitor (bench.ood_monitor)
        row["ood"] = ood_entry(producer, lambda x: (rt.run(x) if chunk is None else _run_chunked(rt, x, chunk)).outputs,
                                ood_ref, seed=opts.seed)
    if rt.bit_exact_reference:
        row["bit_exact_reference"] = _compare_bit_exact(rt, art, seen)
    n_eval = ev.n_samples
    activity = None
    if "synops" in eval_stats:  # activity counts of a neuromorphic run: per-sample averages over the evaluation
        keys = ("synops", "neuron_updates", "messages", "timesteps")
        activity = {k: eval_stats[k] / n_eval for k in keys}
        row["activity"] = activity
        row["activity_totals"] = {k: eval_stats[k] for k in keys}
        row["activity_source"] = f"counted from the {rt_name} run's spikes over {n_eval} evaluation samples"
    work = _workload(art, producer, activity)
    row["workload"] = work.to_dict()
    measured_b1 = None
    for b in opts.batch_sizes:
        if target.latency_provenance == "measured":
            iso = measure_isolated(rt_name, art, producer.example_inputs(b), threads=threads, warmup=opts.warmup,
                                   reps=opts.reps, runtime_options=rt_opts)
            entry = {"provenance": "measured", **iso.to_dict()}
            if b == 1:
                measured_b1 = iso.latency.p50
        else:
            est = target.cost_model.estimate(dataclasses.replace(work, batch=b))
            entry = {"provenance": "estimated", "p50": est.latency_s, "model": est.model,
                     "breakdown": est.breakdown}
        row["latency"][str(b)] = entry
    if measured_b1 is not None:
        work = dataclasses.replace(work, measured_latency_s=measured_b1)
    row["energy"] = energy_figure(target, dataclasses.replace(work, batch=1), _rapl_energy(target, rt, producer, opts))
    return row


def _run_chunked(rt, x: np.ndarray, chunk: int):
    """Run ``x`` through ``rt`` in fixed-size batches (the last one padded with copies of its first row)."""
    outs, stats = [], {}
    for i in range(0, len(x), chunk):
        part = x[i : i + chunk]
        n = len(part)
        if n < chunk:
            part = np.concatenate([part, np.repeat(part[:1], chunk - n, axis=0)])
        res = rt.run(part)
        outs.append(res.outputs[:n])
        stats = res.stats
    return RunResult(np.concatenate(outs), stats)


def _compare_bit_exact(rt, art, seen: dict) -> dict:
    """Re-run the evaluation inputs in the runtime's bit-exact reference model and compare."""
    ref = get_runtime(rt.bit_exact_reference).load(art).run(seen["inputs"])
    counts = ("synops", "neuron_updates", "messages")
    return {
        "runtime": rt.bit_exact_reference,
        "n_samples": int(len(seen["inputs"])),
        "max_abs_diff": float(np.max(np.abs(ref.outputs - seen["outputs"]))),
        "activity_equal": all(ref.stats.get(k) == seen["stats"].get(k) for k in counts),
    }


def _rapl_energy(target, rt, producer, opts: DeployOptions):
    """Energy per batch-1 call from RAPL counters, where this machine has them and the target is this machine."""
    reader = RaplReader(os.environ.get("EDGESMITH_POWERCAP", "/sys/class/powercap"))
    if target.latency_provenance != "measured" or not reader.available():
        return None
    x = producer.example_inputs(1)
    m = reader.measure(lambda: [rt.run(x) for _ in range(opts.reps)])
    return dataclasses.replace(m, energy_j=m.energy_j / opts.reps, seconds=m.seconds / opts.reps,
                               method=f"{m.method}; package energy over {opts.reps} batch-1 calls, averaged")
