"""``edgesmith deploy MODEL --target T``: one pipeline for every model kind, one report shape.

The producer's kind (``models.kinds``) says what its data look like, how it is timed and which speed
figure applies; the target plans the variants for that kind (or refuses the kind, before anything is
built). For every variant: run its passes, load the result in each runtime, score it with the
producer's metric, compare its outputs with the reference (the model in its native format and
runtime), time it where the target is this machine (fresh process per artifact) or estimate it from
the target's cost model, and label energy measured or estimated. A recurrent step graph (state as
inputs and outputs) is fed whole sequences one step at a time (``runtimes.stateful``). Everything
lands in a temporary folder renamed into place at the end, so an interrupted deploy leaves nothing.
"""
from __future__ import annotations

import dataclasses
import shutil
import datetime as _dt
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from edgesmith import __version__
from edgesmith.bench.decide.goal import Goal
from edgesmith.bench.decide.search import search
from edgesmith.bench.decide.write import summary as decision_summary
from edgesmith.bench.decide.write import write_decision
from edgesmith.bench.measure.energy import RaplReader, energy_figure
from edgesmith.bench.measure.latency import check_precision, measure_isolated_sets
from edgesmith.bench.measure.ood_monitor import ood_entry, ood_reference
from edgesmith.bench.pipeline.plans import deploy_plan
from edgesmith.bench.report.writers import SLOWER_MARGIN, write_report
from edgesmith.bench.sources.base import UserRequest, resolve_model
from edgesmith.common import EdgesmithError, Interrupted, atomic_path, check_output, check_seed
from edgesmith.common.checks import is_int
from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.base import n_samples
from edgesmith.compress.formats import get_format, reference_runtime
from edgesmith.compress.calibration_select import check_selector, select_calibration
from edgesmith.hardware import PlanOptions, Workload, get_target
from edgesmith.hardware.workload import scale_activity, workload_from_activity, workload_from_module, workload_from_onnx
from edgesmith.models.kinds import get_kind
from edgesmith.runtimes import RunResult, get_runtime
from edgesmith.runtimes.stateful import recurrent_spec, run_sequence, timing_feed


@dataclass
class DeployOptions:
    """What one deploy runs. ``batch_sizes`` and ``n_calibration`` default to the model kind's; the
    kind's own options travel in ``plan.options``; ``model_options`` are the producer's arguments."""

    model: str
    target: str
    out: Path
    force: bool = False
    seed: int = 0
    threads: int = 0  # 0: all cores of this machine
    batch_sizes: tuple[int, ...] | None = None
    warmup: int = 20
    reps: int = 200  # the most timed calls per batch size: timing stops once the p50 is known to latency_precision
    latency_precision: float = 0.03  # 0: time all reps calls
    n_calibration: int | None = None
    calibration_select: str = "first"  # how the calibration samples are chosen: compress.calibration_select
    sensitivity: bool = False
    progress: bool = True
    plan: PlanOptions = field(default_factory=PlanOptions)
    model_options: dict = field(default_factory=dict)  # producer arguments / model-source options (e.g. tiny=True)
    calibration_data: str | None = None  # the user's data (bench/sources): .npy, .npz, a folder, text
    train_data: str | None = None  # the user's training inputs (+ labels) for fine-tuning passes (QAT)
    eval_data: str | None = None
    labels: str | None = None
    metric: str | None = None
    input_shapes: dict = field(default_factory=dict)  # {input name or "": per-sample shape} to trace a model
    input_types: dict = field(default_factory=dict)  # {input name or "": numpy type name} of those (float32 if not)
    trust_model_file: bool = False  # a model file may be unpickled (it can run code): only if the user says so
    train_fn: object = None  # Python API only: the user's train_fn(model) that QAT passes call instead of their loop
    goal: Goal | None = None  # an accuracy budget and objective: the deploy then chooses the artifact (bench.decide)

    def __post_init__(self):
        self.out = Path(self.out)
        check_selector(self.calibration_select)
        if self.batch_sizes is not None:
            self.batch_sizes = tuple(self.batch_sizes)
            if not self.batch_sizes or any(not is_int(b, 1)
                                           for b in self.batch_sizes):
                raise EdgesmithError(f"batch sizes {list(self.batch_sizes)} are not all positive whole numbers.",
                                     "use e.g. --batch 1 --batch 64.")
        check_seed(self.seed)
        for name, lo in (("warmup", 0), ("reps", 5), ("threads", 0)):
            v = getattr(self, name)
            if not is_int(v, lo):
                raise EdgesmithError(f"{name} is {v!r}.", f"use a whole number of at least {lo}"
                                     + (" (percentiles need a few repetitions)." if name == "reps" else "."))
        check_precision(self.latency_precision)
        if self.goal is not None and not isinstance(self.goal, Goal):
            raise EdgesmithError(f"goal is {self.goal!r}.", "give a Goal (edgesmith.bench.decide.Goal) or leave it out.")
        n = self.n_calibration
        if n is not None and (not is_int(n, 1)):
            raise EdgesmithError(f"n_calibration is {n!r}.", "use a positive number of calibration samples.")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(dataclasses.replace(self, train_fn=None))
        d["out"] = str(self.out)
        if self.train_fn is not None:  # a function is named in the report, not serialised
            fn = self.train_fn
            d["train_fn"] = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
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
    try:  # the installed distribution's version: importing TVM would cost 1.6 s of every deploy
        from importlib.metadata import version

        env["tvm"] = version("apache-tvm")
    except Exception:  # TVM is optional at report time: its absence only removes a version string
        pass
    return env


def _runtime_rows(variant, plan_options: PlanOptions) -> list[tuple[str, str, dict]]:
    """(runtime name, label, options) for each runtime of a variant; TVM also tuned when asked."""
    rows = []
    for name in variant.runtimes:
        if name == "tvm":
            if plan_options.tvm:  # asked outright; records or tuning alone bring only their own rows
                rows.append(("tvm", "tvm (untuned)", {"tune_trials": 0}))
            if plan_options.tvm_records:
                rows.append(("tvm", "tvm (tuning records)", {"tune_trials": 0, "records": True}))
            if plan_options.tvm_tune_trials > 0:
                n = plan_options.tvm_tune_trials
                rows.append(("tvm", f"tvm (tuned, {n} trials)", {"tune_trials": n}))
        else:
            rows.append((name, name, {}))
    return rows


def source_artifact(producer) -> Artifact:
    """The producer's model in its native format (what every variant's passes start from): an in-memory
    module, or a file (a user's ONNX model) with its inputs and recurrent state described in the meta."""
    variable = get_kind(producer.kind).variable_length  # e.g. token sequences of any length: no fixed shape
    shape = None if variable else list(producer.input_shape)
    if shape is not None and any(d is None for d in shape):
        shape = None
    meta = {"input_shape": shape}
    if getattr(producer, "inputs", None):
        meta["inputs"] = [s.to_dict() for s in producer.inputs]
    if getattr(producer, "recurrent", None):
        meta["recurrent"] = producer.recurrent
        meta["input_shape"] = None
    meta.update(getattr(producer, "artifact_meta", None) or {})  # a source's own settings (a NIR graph's dt, steps)
    if producer.native_format == "onnx" and len(meta.get("inputs", [])) > 1:
        meta["input_shape"] = None
    if not get_format(producer.native_format).in_memory:  # a file: a user's ONNX model, a netx network
        from edgesmith.compress.torch_source import torch_source

        # an ONNX export of the user's torch module carries the module on, for training passes (torch-source)
        return Artifact(producer.native_format, path=producer.path, meta=meta,
                        module=torch_source(producer) if producer.native_format == "onnx" else None)
    return Artifact(producer.native_format, module=producer.module, meta=meta)


def predictor(rt, art: Artifact, chunk: int | None = None, seen: dict | None = None):
    """A prediction function over whole inputs: recurrent step graphs are fed one step at a time;
    backends that compile per shape (TVM) get fixed-size chunks. ``seen`` keeps the last call."""
    spec = recurrent_spec(art.meta)

    def predict(x):
        if spec is not None:
            out, stats = run_sequence(rt, spec, x)
            res = RunResult(out, stats)
        else:
            res = rt.run(x) if chunk is None else _run_chunked(rt, x, chunk)
        if seen is not None:  # every call of one evaluation (a producer may evaluate batch by batch)
            seen.setdefault("calls", []).append((x, res.outputs, res.stats))
        return res.outputs

    return predict


def timing_inputs(art: Artifact, producer, batch: int):
    """What one timed call gets: ``batch`` samples, or for a step graph their first step and a zero state."""
    x = producer.example_inputs(batch)
    spec = recurrent_spec(art.meta)
    return x if spec is None else timing_feed(spec, x, art.path)


def _workload(art: Artifact, producer, kind, activity: dict | None) -> Workload:
    """Per-sample operation counts: from simulator activity when there is some, else from the graph."""
    if activity is not None:
        return workload_from_activity(activity, weight_bytes=art.size_bytes())
    if "workload" in art.meta:  # counted by the pass that wrote the artifact (e.g. the C decoder's arrays)
        return Workload(**art.meta["workload"])
    if art.format == "onnx":
        feed = timing_inputs(art, producer, 1)  # resolves dynamic dimensions (sequence length, image size)
        names = [s["name"] for s in art.meta.get("inputs", [])] or [None]
        shapes = ({k: v.shape for k, v in feed.items()} if isinstance(feed, dict)
                  else {names[0]: feed.shape} if names[0] else None)
        work = workload_from_onnx(art.path, input_shapes=shapes,
                                  example=feed if isinstance(feed, dict) else {names[0]: feed} if names[0] else None)
    elif art.format == "torch":
        work = workload_from_module(art.module, producer.input_shape)
    else:  # trees, C: comparisons and lookups, no multiply-accumulates to count
        weight_bytes = art.meta.get("weight_bytes", art.size_bytes())  # a C file's tables, not its source text
        return Workload(weight_bytes=float(weight_bytes), n_layers=1,
                        source=f"{art.format} artifact: no MACs (comparisons and table lookups); weights read once")
    if kind.sequential_axis is not None and not recurrent_spec(art.meta):
        # a whole-clip graph of a streaming model still runs step by step on a device: counts are totals
        work = dataclasses.replace(work, timesteps=int(producer.input_shape[kind.sequential_axis]))
    return work


def load_training_data(producer, path: str):
    """The user's training data for fine-tuning passes: inputs, or (inputs, labels) when the file holds labels
    (the forms of --eval-data: .npy, .npz by input name with ``labels``/``targets``, a folder)."""
    from edgesmith.models.user_data import TensorSpec, load_tensors

    from edgesmith.compress.torch_source import torch_source

    if producer.kind != "tensor" or torch_source(producer) is None:
        raise EdgesmithError(f"--train-data fine-tunes torch models of kind tensor (QAT); {producer.name} is a "
                             f"{producer.native_format} model of kind {producer.kind}"
                             + (" with no torch module behind it" if producer.native_format == "onnx" else "") + ".",
                             "drop --train-data (its own passes bring their training data, if any), or deploy the "
                             "torch model (path/to/file.py:factory).")
    specs = list(getattr(producer, "inputs", None) or [TensorSpec(
        "input", np.asarray(producer.example_inputs(1)).dtype.name, tuple(producer.input_shape))])
    if len(specs) != 1:
        raise EdgesmithError(f"--train-data fine-tunes single-input models; {producer.name} takes {len(specs)}.",
                             "drop --train-data; QAT then distils the float model on the calibration data.")
    data = load_tensors(path, specs, "training data")
    x = next(iter(data.inputs.values()))
    if data.labels is None:
        return x
    if len(data.labels) != len(x):
        raise EdgesmithError(f"{path} holds {len(x)} training inputs but {len(data.labels)} labels.",
                             "give one label per input.")
    return x, data.labels


def _check_finite_outputs(out, model: str) -> None:
    """The reference's outputs on the probe inputs hold no NaN: it would score every variant "nan" and still pass.
    (An infinity can be meant: a log-probability of a masked class.)"""
    arrays = out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else [out]
    for a in arrays:
        a = np.asarray(a)
        if np.issubdtype(a.dtype, np.floating) and np.isnan(a).any():
            raise EdgesmithError(f"{model} returns NaN values on its example inputs.",
                                 "check the model's weights for NaN (a diverged training run) and give inputs in the "
                                 "range it expects (--calibration-data / --eval-data).")


def preflight(opts: DeployOptions) -> None:
    """What can be checked of a deploy without building or loading its model: the target, the model's name or
    file, and for a producer its arguments, its kind on that target and the kind's options. A demo and a sweep run
    it on every deploy before the first one starts."""
    from edgesmith.bench.sources.base import check_model_spec
    from edgesmith.models.base import check_producer_options, producer_class

    target = get_target(opts.target)
    check_model_spec(opts.model)
    if producer_class(opts.model) is not None:
        kind = get_kind(check_producer_options(opts.model, opts.model_options).kind)
        target.check_kind(kind.name, opts.model)
        kind.options(opts.plan.options)


def deploy(opts: DeployOptions) -> Path:
    """Run the plan of ``opts.target`` for ``opts.model``; returns the report folder."""
    check_output(opts.out, force=opts.force, folder=True)
    target = get_target(opts.target)
    producer = resolve_model(opts.model, UserRequest(
        calibration_data=opts.calibration_data, eval_data=opts.eval_data, labels=opts.labels, metric=opts.metric,
        input_shapes=dict(opts.input_shapes), input_types=dict(opts.input_types), options=dict(opts.model_options),
        seed=opts.seed, trust_model_file=opts.trust_model_file), seed=opts.seed)
    kind = get_kind(producer.kind)
    kind.check_producer(producer)
    if opts.goal is not None:  # a budget this model's metric cannot read is refused before anything is built
        _check_goal_metric(opts.goal, producer)
    # what the user gave to train on travels in the deploy's own state, not on the model: it decides (before any
    # plan) whether QAT variants are offered, and is what their passes fine-tune on
    user_training = None if opts.train_data is None else load_training_data(producer, opts.train_data)
    if opts.train_fn is not None and not callable(opts.train_fn):
        raise EdgesmithError(f"train_fn is {opts.train_fn!r}, not a function.",
                             "pass a function that takes the quantized torch model and trains it in place.")
    plan_options = dataclasses.replace(opts.plan, training_given=user_training is not None or opts.train_fn is not None)
    target.check_kind(kind.name, opts.model)  # before any training: an unsupported pair costs nothing
    kind.options(opts.plan.options)  # a bad --option fails here too, not after the build
    batch_sizes = _batch_sizes(opts, kind, producer)
    if opts.goal is not None and opts.goal.batch not in batch_sizes:  # the objective is read at the goal's batch
        batch_sizes = (*batch_sizes, opts.goal.batch)
    _check_batch_memory(batch_sizes, producer)  # before any training: --batch 1000000000 fails now, not later
    threads = opts.threads or os.cpu_count() or 1
    say = (lambda msg: tqdm.write(msg)) if opts.progress else (lambda msg: None)

    for rt_name in {r for v in deploy_plan(target, producer, plan_options).variants for r in v.runtimes}:
        get_runtime(rt_name)  # a runtime that cannot run here (no .venv-lava, no gcc) is refused before any work
    say(f"[edgesmith] building {opts.model} ({kind.name}, seed {opts.seed})")
    producer.build()
    plan = deploy_plan(target, producer, plan_options)  # again, now that the model is built (its size is checked)
    ref_art = source_artifact(producer)
    ref_name = reference_runtime(ref_art.format)
    ref_rt = get_runtime(ref_name, threads=threads).load(ref_art)
    goal = opts.goal
    ref_split = None
    if goal is not None:
        ref_split = producer.evaluate_split(predictor(ref_rt, ref_art), goal.validation_fraction, opts.seed)
    ref_eval = ref_split.all if ref_split is not None else producer.evaluate(predictor(ref_rt, ref_art))
    probe = producer.example_inputs(getattr(producer, "fixed_batch", None) or kind.probe_samples)
    ref_out = predictor(ref_rt, ref_art)(probe)
    _check_finite_outputs(ref_out, opts.model)
    ood_ref = ood_reference(producer, lambda x: ref_rt.run(x).outputs, seed=opts.seed)  # None: no OOD inputs

    # one calibration set for every variant: the influence selector runs the fp32 model over its pool
    n_calibration = opts.n_calibration or kind.default_n_calibration
    calibration = select_calibration(producer, n_calibration, opts.calibration_select, seed=opts.seed)
    train_data = user_training if user_training is not None else producer.training_data()
    ctx_common = dict(calibration=calibration, example_input=producer.example_inputs(1), seed=opts.seed,
                      sensitivity=opts.sensitivity, progress=opts.progress, train_data=train_data, train_fn=opts.train_fn,
                      evaluate=_artifact_scorer(producer, threads, goal, opts.seed))
    run = _VariantRun(target, producer, kind, threads, opts, batch_sizes, ref_out, probe, ood_ref)

    with atomic_path(opts.out, force=opts.force) as tmp:
        tmp.mkdir(parents=True)
        if goal is not None:  # the int8 calibration ranges, kept for the search's rebuilds and removed after it
            ctx_common["keep"] = tmp / ".keep"
        results, variants, failed = [], [], []
        built = {}  # variant name -> its artifact: a goal's paired timing and chosen/ read them
        steps = [(v, rt) for v in plan.variants for rt in _runtime_rows(v, opts.plan)]
        bar = tqdm(total=len(steps), desc="deploy", unit="run", disable=not opts.progress)
        for variant in plan.variants:
            bar.set_postfix_str(f"{variant.name}: passes")
            ctx = PassContext(workdir=tmp / "artifacts" / variant.name, **ctx_common)
            try:
                art, reports = run_passes(ref_art, variant.passes, ctx)
            except EdgesmithError:
                raise  # a user error (an option, a file, a missing dataset): one line, as always
            except Exception as e:  # a pass's own fault on this model: this variant's row says so, the others go on
                failed.append({"variant": variant.name, "runtime": variant.runtimes[0], "runtime_label": "passes",
                               "error": f"{type(e).__name__} in its passes: {_first_line(e)[:300]}"})
                say(f"[edgesmith] {variant.name} failed in its passes: {failed[-1]['error']}")
                bar.update(len(_runtime_rows(variant, opts.plan)))
                continue
            target.check_fits(art.size_bytes(), f"variant {variant.name}")
            built[variant.name] = art
            where = None if art.path is None else str(art.path.relative_to(tmp) if art.path.is_relative_to(tmp) else art.path)
            variants.append({**variant.to_dict(), "artifact": where,
                             "pass_reports": [r.to_dict() for r in reports]})
            bpw = next((r.bits_per_weight for r in reversed(reports) if r.bits_per_weight is not None), None)
            for rt_name, label, rt_opts in _runtime_rows(variant, opts.plan):
                bar.set_postfix_str(f"{variant.name}: {label}")
                try:
                    results.append(run.row(art, variant.name, rt_name, label, rt_opts, bpw))
                except Interrupted:
                    raise
                except Exception as e:
                    # a variant a runtime cannot run (the runtime's own error on a file edgesmith built, or a
                    # backend that cannot compile this model) is a failed row: it never costs the other figures
                    error = (f"{e.problem} ({e.fix})" if isinstance(e, EdgesmithError) else
                             f"{type(e).__name__}: {_first_line(e)[:300]}")
                    if rt_name == variant.runtimes[0] and not isinstance(e, EdgesmithError):
                        error += (" (keep the failing node(s) in fp32 with --option 'exclude=[\"NODE\"]', the node "
                                  "the message names)")
                    failed.append({"variant": variant.name, "runtime": rt_name, "runtime_label": label, "error": error})
                    say(f"[edgesmith] {variant.name} on {label} failed: {failed[-1]['error']}")
                bar.update(1)
        bar.close()
        if not results:  # nothing measured at all: that is no report, but one error naming the first failure
            f = failed[0]
            raise EdgesmithError(f"no variant of {opts.model} ran on {target.name}: {f['variant']} "
                                 f"({f['runtime_label']}) failed: {f['error']}",
                                 "fix that, or leave the variant out with --variant for the others.")
        decision = None
        if goal is not None:
            session = _GoalSession(run, goal, ref_art, ctx_common, tmp / "artifacts", results, variants, plan.variants,
                                   plan.variants[0].name, ref_split, ref_eval, built, plan_options)
            decision = search(goal, session, say)
            session.drop_probes()
        report = {
            "model": opts.model,
            "kind": kind.describe() | {"options": dataclasses.asdict(kind.options(opts.plan.options))},
            "target": target.describe(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "seed": opts.seed,
            "threads": threads,
            "batch_sizes": list(batch_sizes),
            "unit": kind.unit,
            "options": opts.to_dict(),
            "environment": environment(),
            "plan": plan.to_dict(),
            "latency_method": _latency_method(target, opts),
            "reference": {"runtime": ref_name, "format": ref_art.format, "evaluation": ref_eval.to_dict(),
                          "size_bytes": ref_art.size_bytes()},
            "calibration": {"n": None if calibration is None else n_samples(calibration),
                            "select": opts.calibration_select},
            "ood_reference": None if ood_ref is None else ood_ref.entry,
            "variants": variants,
            "results": results,
            "failed_runs": failed,
            "notes": list(producer.report_notes()),
        }
        report["warnings"] = [f"variant {f['variant']} failed ({f['runtime_label']}): {f['error']}" for f in failed
                              if f["runtime"] == _first_runtime(plan, f["variant"])]
        report["warnings"] += slower_than_baseline(results, plan.variants[0].name if plan.variants else None)
        for w in report["warnings"]:
            say(f"[edgesmith] warning: {w}")
        if decision is not None:
            report["decision"] = {"summary": decision_summary(decision), "details": "decision.md"}
            write_decision(decision, tmp, built, {v["name"]: v["passes"] for v in variants})
            say(f"[edgesmith] {report['decision']['summary']}")
        write_report(report, tmp)
    say(f"[edgesmith] report written to {opts.out}/report.md")
    return opts.out


def _first_runtime(plan, variant: str) -> str | None:
    return next((v.runtimes[0] for v in plan.variants if v.name == variant), None)


def slower_than_baseline(results: list[dict], baseline: str | None, margin: float = SLOWER_MARGIN) -> list[str]:
    """A warning for every compressed variant measured slower than the plan's first (uncompressed) variant
    on the same runtime and batch: compression that costs speed should be seen, not found later."""
    if baseline is None:
        return []
    base = {(r["runtime_label"], b): e["p50"] for r in results if r["variant"] == baseline
            for b, e in r["latency"].items() if e["provenance"] == "measured"}
    out = []
    for r in results:
        if r["variant"] == baseline:
            continue
        for b, e in r["latency"].items():
            ref = base.get((r["runtime_label"], b))
            if ref and e["provenance"] == "measured" and e["p50"] > margin * ref:
                out.append(f"{r['variant']} on {r['runtime_label']} is {e['p50'] / ref:.2f}x slower than {baseline} "
                           f"at batch {b} (p50 {e['p50'] * 1e6:.1f} vs {ref * 1e6:.1f} us, measured)")
    return out


def _batch_sizes(opts: DeployOptions, kind, producer) -> tuple[int, ...]:
    """The batch sizes to time: the user's, else the kind's; a model with a fixed batch takes only that."""
    fixed = getattr(producer, "fixed_batch", None)
    if fixed:
        if opts.batch_sizes and set(opts.batch_sizes) != {fixed}:
            raise EdgesmithError(f"the model was exported with a fixed batch of {fixed}; it cannot be timed at batch "
                                 f"{', '.join(map(str, opts.batch_sizes))}.",
                                 f"use --batch {fixed}, or export the model with a dynamic batch dimension.")
        return (fixed,)
    return opts.batch_sizes or kind.default_batch_sizes


def _check_batch_memory(batch_sizes, producer) -> None:
    """Refuse a batch whose inputs alone would not fit in half the memory this machine has free."""
    shape = [d for d in (producer.input_shape or ()) if d is not None]
    per_sample = 4 * int(np.prod(shape, dtype=np.int64)) if shape else 4
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    for b in batch_sizes:
        need = b * per_sample
        if need > free / 2:
            raise EdgesmithError(f"batch {b} needs {need / 2**30:.1f} GiB of inputs but {free / 2**30:.1f} GiB of memory "
                                 "is free.", "time smaller batches (e.g. --batch 1 --batch 64).")


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


def _latency_method(target, opts: DeployOptions) -> str:
    if target.latency_provenance == "measured":
        from edgesmith.bench.measure.latency import MIN_BUDGETED, PRECISION_BUDGET_S, WARMUP_BUDGET_S

        calls = (f"up to {opts.reps} timed calls per batch size, stopping once the p50's 95% interval is within "
                 f"+-{opts.latency_precision:.0%} of it or after {PRECISION_BUDGET_S:.0f} s of them (at least "
                 f"{MIN_BUDGETED}; n and cv in the latency detail say how well the p50 is known)"
                 if opts.latency_precision else f"{opts.reps} timed calls per batch size")
        warm = (f"{opts.warmup} warm-up calls (at most {WARMUP_BUDGET_S:.0f} s of them, at least 2)"
                if opts.latency_precision else f"{opts.warmup} warm-up")
        return (f"measured: {warm} + {calls}, "
                "perf_counter around run(), one fresh process per artifact, its batch sizes timed there in ascending order")
    return f"estimated with the {target.cost_model.name} cost model (no {target.name} on this machine)"


def _artifact_scorer(producer, threads: int, goal: Goal | None = None, seed: int = 0):
    """A metric function over ONNX artifacts, used by passes for the per-layer sensitivity table; with a goal, on
    the validation part only, so nothing the choice is tuned on is the held-out figure it reports."""

    def score(art: Artifact) -> float:
        rt = get_runtime("onnxruntime", threads=threads).load(art)
        return _validation_value(producer, predictor(rt, art), goal, seed)

    return score


def _validation_value(producer, predict, goal: Goal | None, seed: int) -> float:
    """The metric of ``predict`` on the goal's validation part (the whole evaluation without a goal or a split)."""
    split = None if goal is None else producer.evaluate_split(predict, goal.validation_fraction, seed)
    return (split.validation if split is not None else producer.evaluate(predict)).value


def _check_goal_metric(goal: Goal, producer) -> None:
    """A budget that cannot be read off this model's metric is refused before any variant is built."""
    name = producer.metric.name
    if goal.min_sqnr is not None and name != "fidelity":
        raise EdgesmithError(f"--min-sqnr bounds output SQNR (the fidelity metric), but this deploy scores {name}.",
                             f"state the budget in {name}: --max-drop 1% (or in its units), or drop --labels/--metric.")
    if goal.max_drop is not None and name == "fidelity":
        raise EdgesmithError("--max-drop reads a drop of the task metric, but this deploy has no labels and scores "
                             "fidelity (output SQNR against fp32).",
                             "give a floor in dB with --min-sqnr 30, or labels (--labels) and --metric.")


class _GoalSession:
    """What ``bench.decide.search`` reads of a deploy and may ask of it: its rows, and building, scoring and
    measuring the variants the search makes (restored layers) the way the deploy's own were."""

    def __init__(self, run, goal, ref_art, ctx_common, workdir, results, variants, plan_variants, baseline,
                 ref_split, ref_eval, built, plan_options):
        self.run, self.goal, self.ref_art, self.ctx_common, self.workdir = run, goal, ref_art, ctx_common, workdir
        self.results, self.variants, self.plan_variants, self.baseline = results, variants, plan_variants, baseline
        self.reference, self.reference_value, self.built = ref_split, ref_eval.value, built
        self.plan_options = plan_options
        producer = run.producer
        self.higher_is_better, self.metric_name = producer.metric.higher_is_better, producer.metric.name
        self.measured = run.target.latency_provenance == "measured"
        self.progress = run.opts.progress
        self.split_note = (f"{ref_split.validation.n_samples} samples to check the budget on and "
                           f"{ref_split.held_out.n_samples} held out to report, drawn with seed {run.opts.seed}"
                           if ref_split is not None else
                           f"{producer.name} scores its evaluation data only as a whole, so the budget is checked "
                           "on the figure reported (no held-out part)")
        self._arts: dict = {}  # build name -> (artifact, pass reports)

    def _build(self, variant, detail: bool):
        """The variant's artifact: a rebuild that is only scored skips the passes' per-layer detail; every build
        reuses the calibration ranges the deploy's own int8 run kept (``PassContext.keep``)."""
        name = variant.name if detail else f"{variant.name}.probe"
        if name not in self._arts:
            ctx = PassContext(workdir=self.workdir / name, **{**self.ctx_common, "progress": False, "detail": detail})
            self._arts[name] = run_passes(self.ref_art, variant.passes, ctx)
        return self._arts[name]

    def score(self, variant) -> float:
        art, _ = self._build(variant, detail=False)
        rt = get_runtime(variant.runtimes[0], threads=self.run.threads).load(art)
        return _validation_value(self.run.producer, predictor(rt, art), self.goal, self.run.opts.seed)

    def measure(self, variant) -> dict:
        art, reports = self._build(variant, detail=True)
        self.built[variant.name] = art
        where = str(art.path.relative_to(self.workdir.parent)) if art.path is not None else None
        self.variants.append({**variant.to_dict(), "artifact": where, "pass_reports": [r.to_dict() for r in reports]})
        bpw = next((r.bits_per_weight for r in reversed(reports) if r.bits_per_weight is not None), None)
        rt_name = variant.runtimes[0]
        row = self.run.row(art, variant.name, rt_name, rt_name, {}, bpw)
        self.results.append(row)
        return row

    def qat_variants(self, epochs: int) -> tuple[list, str | None]:
        """The target's quantization-aware training variants for this model with ``epochs`` of training, those its
        plan did not already build; or none, and why."""
        options = dataclasses.replace(self.plan_options, options={**self.plan_options.options, "qat_epochs": epochs},
                                      variants=())
        try:
            plan = deploy_plan(self.run.target, self.run.producer, options)
        except EdgesmithError as e:
            return [], f"not tried: {e.problem}"
        have = {v.name for v in self.plan_variants}
        qat = [v for v in plan.variants if v.name not in have and any("qat" in p.kind for p in v.passes)]
        if not qat:
            why = next((n for n in plan.notes if "qat" in n.lower()), "")
            return [], ("not tried: the target's plan offers no QAT variant for this model (QAT needs a torch model "
                        "and data to train on: --train-data)" + (f"; {why}" if why else ""))
        return qat, None

    def timing_call(self, row: dict):
        if row["runtime"] == "tvm":  # compiled per shape in its own worker; its isolated figure stands
            return None
        art = self.built[row["variant"]]
        rt = get_runtime(row["runtime"], threads=self.run.threads, **row.get("runtime_options", {})).load(art)
        x = timing_inputs(art, self.run.producer, self.goal.batch)
        return lambda: rt.run(x)

    def drop_probes(self) -> None:
        """Remove what the search built and did not keep: scored rebuilds and the calibration ranges kept for them."""
        kept = {v["name"] for v in self.variants}
        for name in [n for n in self._arts if n not in kept]:
            shutil.rmtree(self.workdir / name, ignore_errors=True)
        if self.ctx_common.get("keep") is not None:
            shutil.rmtree(self.ctx_common["keep"], ignore_errors=True)


@dataclass
class _VariantRun:
    """Everything a report row needs besides the artifact: the deploy's fixed inputs, gathered once."""

    target: object
    producer: object
    kind: object
    threads: int
    opts: DeployOptions
    batch_sizes: tuple[int, ...]
    ref_out: np.ndarray
    probe: np.ndarray
    ood_ref: object = None

    def row(self, art, variant_name, rt_name, label, rt_opts, bpw) -> dict:
        producer, opts = self.producer, self.opts
        rt = get_runtime(rt_name, threads=self.threads, **rt_opts).load(art)
        seen: dict = {}
        # backends that compile per input shape (TVM) evaluate in chunks of the largest timed batch, padded,
        # so evaluation reuses the kernels compiled (and tuned) for timing instead of building one more
        chunk = max(self.batch_sizes) if rt_name == "tvm" else None
        predict = predictor(rt, art, chunk, seen)
        split = None
        if opts.goal is not None:
            split = producer.evaluate_split(predict, opts.goal.validation_fraction, opts.seed)
        ev = split.all if split is not None else producer.evaluate(predict)
        calls = seen.pop("calls")
        eval_inputs, eval_outputs, eval_stats = _merge_calls(calls)
        out = predictor(rt, art, chunk)(self.probe)
        row = {
            "variant": variant_name,
            "runtime": rt_name,
            "runtime_label": label,
            "runtime_options": rt_opts,
            "evaluation": ev.to_dict(),
            **({"evaluation_split": {"validation": split.validation.to_dict(), "held_out": split.held_out.to_dict()}}
               if split is not None else {}),
            "size_bytes": art.size_bytes(),
            "bits_per_weight": bpw,
            "max_abs_diff": float(np.max(np.abs(out - self.ref_out))) if out.shape == self.ref_out.shape else None,
            "latency": {},
            "speed": {},
        }
        if self.ood_ref is not None:  # OOD scores of this variant vs the fp32 monitor (bench.measure.ood_monitor)
            row["ood"] = ood_entry(producer, predictor(rt, art, chunk), self.ood_ref, seed=opts.seed)
        if rt.bit_exact_reference:
            row["bit_exact_reference"] = _compare_bit_exact(rt, art, calls)
        n_eval = ev.n_samples
        activity = None
        if "synops" in eval_stats:  # activity counts of a neuromorphic run: per-sample averages over the evaluation
            activity = scale_activity(eval_stats, n_eval)
            row["activity"] = {k: activity[k] for k in ACTIVITY_KEYS}
            row["activity_totals"] = {k: eval_stats[k] for k in ACTIVITY_KEYS}
            row["activity_source"] = f"counted from the {rt_name} run over {n_eval} evaluation samples"
        work = _workload(art, producer, self.kind, activity)
        row["workload"] = work.to_dict()
        measured_b1 = None
        timed = {}
        if self.target.latency_provenance == "measured":  # every batch size in one fresh process, ascending
            ascending = sorted(self.batch_sizes)
            timed = dict(zip(ascending, measure_isolated_sets(
                rt_name, art, [timing_inputs(art, producer, b) for b in ascending], threads=self.threads,
                warmup=opts.warmup, reps=opts.reps, runtime_options=rt_opts, precision=opts.latency_precision)))
        for b in self.batch_sizes:
            if b in timed:
                iso = timed[b]
                entry = {"provenance": "measured", **iso.to_dict()}
                if b == 1:
                    measured_b1 = iso.latency.p50
            else:
                est = self.target.cost_model.estimate(dataclasses.replace(work, batch=b))
                entry = {"provenance": "estimated", "p50": est.latency_s, "model": est.model,
                         "breakdown": est.breakdown}
            row["latency"][str(b)] = entry
            row["speed"][str(b)] = {**self.kind.speed(entry["p50"], b, producer, art).to_dict(),
                                    "provenance": entry["provenance"]}
        if measured_b1 is not None:
            work = dataclasses.replace(work, measured_latency_s=measured_b1)
        row["energy"] = energy_figure(self.target, dataclasses.replace(work, batch=1), self._rapl_energy(rt, art))
        row["energy"]["per"] = self.kind.unit
        return row

    def _rapl_energy(self, rt, art):
        """Energy per batch-1 call from RAPL counters, where this machine has them and the target is this machine."""
        reader = RaplReader(os.environ.get("EDGESMITH_POWERCAP", "/sys/class/powercap"))
        if self.target.latency_provenance != "measured" or not reader.available():
            return None
        x = timing_inputs(art, self.producer, 1)
        reps = self.opts.reps
        m = reader.measure(lambda: [rt.run(x) for _ in range(reps)])
        return dataclasses.replace(m, energy_j=m.energy_j / reps, seconds=m.seconds / reps,
                                   method=f"{m.method}; package energy over {reps} batch-1 calls, averaged")


ACTIVITY_KEYS = ("synops", "neuron_updates", "messages", "timesteps")


def _merge_calls(calls: list) -> tuple:
    """(inputs, outputs, stats) of all the calls of one evaluation: arrays concatenated, activity counts
    summed (the last call's stats for the rest)."""
    xs, outs, stats = zip(*calls)
    if isinstance(xs[0], dict):
        inputs = {k: np.concatenate([x[k] for x in xs]) for k in xs[0]}
    else:
        inputs = np.concatenate(xs)
    merged = dict(stats[-1])
    for k in ACTIVITY_KEYS:
        if all(k in s for s in stats):
            merged[k] = sum(s[k] for s in stats)
    layers = [s.get("per_layer") for s in stats]
    if all(layers) and len({len(p) for p in layers}) == 1:  # per-layer counts summed over the calls too
        merged["per_layer"] = [{**per[0], **{k: sum(p[k] for p in per) for k in LAYER_COUNTS if k in per[0]}}
                               for per in zip(*layers)]
    return inputs, np.concatenate(outs), merged


LAYER_COUNTS = ("synops", "neuron_updates", "messages", "in_messages")


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


def _compare_bit_exact(rt, art, calls: list) -> dict:
    """Replay every evaluation call in the runtime's bit-exact reference model (call by call: a simulated
    network may carry state from one sample to the next within a call) and compare outputs and activity."""
    ref = get_runtime(rt.bit_exact_reference).load(art)
    counts = ("synops", "neuron_updates", "messages")
    diff, equal, n = 0.0, True, 0
    for x, out, stats in calls:
        r = ref.run(x)
        diff = max(diff, float(np.max(np.abs(r.outputs - out))))
        equal &= all(r.stats.get(k) == stats.get(k) for k in counts)
        n += len(out)
    return {"runtime": rt.bit_exact_reference, "n_samples": n, "calls": len(calls), "max_abs_diff": diff,
            "activity_equal": bool(equal)}
