"""The ``edgesmith`` command line.

    edgesmith targets                      targets, the model kinds they run, cost-model coefficients + sources
    edgesmith models                       registered model producers and their kinds
    edgesmith kinds                        model kinds and their options (--option KEY=VALUE)
    edgesmith passes                       registered compression/export passes and their options
    edgesmith export MODEL --out FILE      write a producer's model with its kind's export pass
    edgesmith quantize MODEL|F.onnx --pass int8-qdq --out FILE      one compression pass + its report
    edgesmith bench F.onnx --runtime onnxruntime --batch 1          latency in a fresh process
    edgesmith deploy MODEL --target T --out DIR                     the target's whole plan -> report folder
    edgesmith deploy --recipe recipe.toml                           the same, options from a TOML recipe
    edgesmith sweep sweep.toml                                      a grid of deploys, parallel or on Ray, resumable
    edgesmith demo                         the deploys of the shipped demo recipe, with a summary

Every model kind (tensor, token-lm, stream, tree-policy) goes through the same ``deploy``; options that
belong to one kind or pass are ``--option KEY=VALUE`` (a recipe's ``[options]`` table), checked against
that kind's or pass's options dataclass. Flags win over a recipe. User errors print one line (problem
and fix) and exit with status 2; they never print a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path

from edgesmith.bench import api
from edgesmith.bench.recipe import deploy_options, load_recipe, parse_key_values
from edgesmith.common import EdgesmithError, Interrupted, check_output, write_json

# --- listing commands ---------------------------------------------------------------------------------


def cmd_targets(args) -> int:
    from edgesmith.hardware import get_target, target_names

    descs = [get_target(n).describe() for n in target_names()]
    if args.json:
        print(json.dumps(descs, indent=2))
        return 0
    for d in descs:
        print(f"{d['name']}: {d['description']}")
        print(f"  kinds: {', '.join(d['kinds'])}" + "".join(f"; not {k}" for k in d["refused_kinds"]))
        print(f"  formats: {', '.join(d['numeric_formats'])}; runtime: {d['runtime']}; export: {d['export_format']}; "
              f"latency: {d['latency_provenance']}")
        print(f"  memory budget: {d['memory_budget_bytes'] / 2**20:,.0f} MiB ({d['memory_budget_source']})")
        print(f"  cost model: {d['cost_model']}")
        if d.get("cost_profile"):  # host-cpu: the part whose package figures stand for this CPU
            print(f"  cost profile: {d['cost_profile']['assumption']}")
        for c in d["coefficients"]:
            print(f"    {c['name']} = {c['value']:g} {c['unit']}  [{c['source']}]" + (f" ({c['note']})" if c.get("note") else ""))
        print()
    return 0


def cmd_models(args) -> int:
    from edgesmith.models import get_producer, producer_names

    for n in producer_names():
        p = get_producer(n)
        print(f"{n} [{p.kind}]: {p.description}  (input {tuple(p.input_shape)}, metric {p.metric.name})")
    return 0


def cmd_kinds(args) -> int:
    from edgesmith.models.kinds import get_kind, kind_names

    for n in kind_names():
        d = get_kind(n).describe()
        print(f"{n}: {d['description']} (figures per {d['unit']}; batch sizes {d['default_batch_sizes']})")
        for name, o in d["options"].items():
            print(f"  --option {name}={json.dumps(o['default'])}  {o['help']}")
    return 0


def cmd_passes(args) -> int:
    from edgesmith.compress.base import pass_config_type, pass_kinds

    for k in pass_kinds():
        cls = pass_config_type(k)
        opts = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls))
        print(f"{k}: {cls.input_format} -> {cls.output_format}; options: {opts or '(none)'}")
    return 0


def cmd_runtimes(args) -> int:
    from edgesmith.runtimes.base import RUNTIMES

    for name in RUNTIMES.names():
        cls = RUNTIMES.get(name)
        ok, why = cls.available()
        state = "available" if ok else f"not available: {why.replace(' Fix: ', '; fix: ')}"
        print(f"{name}: loads {', '.join(cls.formats)}; {cls.description or '(no description)'}; {state}")
    return 0


# --- export / quantize / bench -------------------------------------------------------------------------


def _load_calibration(path: str | None):
    """The user's calibration inputs: one array (.npy) or a dict by input name (.npz, a folder)."""
    if path is None:
        return None
    from edgesmith.models.user_data import LABEL_KEYS, read_arrays

    arrays = {k: v for k, v in read_arrays(path).items() if k not in LABEL_KEYS}
    return arrays[""] if set(arrays) == {""} else arrays


def _traced_inputs(args) -> dict:
    from edgesmith.bench.sources.base import parse_input_shapes

    shapes, types = parse_input_shapes(args.input_shape)
    return {"input_shapes": shapes, "input_types": types}


def cmd_export(args) -> int:
    out = api.export(args.model, args.out, opset=args.opset, seed=args.seed, force=args.force, dtype=args.dtype,
                     model_options=parse_key_values(args.model_option, "--model-option"),
                     options=parse_key_values(args.option, "--option"), example_data=args.example_data,
                     trust_model_file=args.trust_model_file, **_traced_inputs(args))
    print(f"wrote {out}")
    return 0


def cmd_quantize(args) -> int:
    # a model file reads its data files through its own source, as deploy does (model options, text for a language
    # model's checkpoint, a recurrent ONNX model's step feeds)
    user_file = api.is_model_file(args.model)
    res = api.quantize(args.model, args.pass_kind, out=args.out, options=parse_key_values(args.option, "--option"),
                       calibration=None if user_file else _load_calibration(args.calibration_data),
                       calibration_data=args.calibration_data if user_file else None, eval_data=args.eval_data,
                       n_calibration=args.n_calibration,
                       seed=args.seed, model_options=parse_key_values(args.model_option, "--model-option"),
                       sensitivity=args.sensitivity, force=args.force, progress=not args.quiet,
                       trust_model_file=args.trust_model_file, **_traced_inputs(args))
    final = next(r for r in res.reports if r.config["kind"] == args.pass_kind)  # the user's pass, not the export
    print(f"wrote {res.path} ({final.size_before_bytes:,} -> {final.size_after_bytes:,} bytes"
          + (f", {final.bits_per_weight:.2f} bits/weight" if final.bits_per_weight else "")
          + f"); report {res.report_path}")
    ev = res.evaluation
    if ev is not None:
        data = f"{ev.n_samples} samples of {ev.extra['data']}" if "data" in ev.extra else f"{ev.n_samples} held-out samples"
        print(f"{ev.metric.name} of the written file ({data}, {ev.extra['runtime']}): {ev.value:.4f}")
    if res.unscored:
        print(f"the written file is not scored: {res.unscored}")
    return 0


def bench_inputs(model, shapes: dict, batch: int, seed: int, types: dict | None = None) -> dict:
    """Random inputs for every data input of an ONNX model: its declared dims and type, the batch, and
    ``--input-shape [NAME=]D,...`` for dynamic ones; floats standard normal, integers ones for a mask, else zeros
    (valid ids), as ``input_fill`` says."""
    import numpy as np

    from edgesmith.bench.sources.base import check_given_type, given_for, synthetic_array
    from edgesmith.compress.onnx_analysis import data_inputs

    rng = np.random.default_rng(seed)
    inputs = data_inputs(model)
    out = {}
    for name, dtype, dims in inputs:
        given = given_for(shapes, name, len(inputs))
        check_given_type(types or {}, name, len(inputs), dtype, "graph",
                         "drop ':{said}' (bench feeds each input the graph's own type).")
        fixed = dims[0]
        if fixed is not None and fixed != batch:
            raise EdgesmithError(f"input {name!r} has a fixed batch of {fixed}; it cannot be timed at batch {batch}.",
                                 f"use --batch {fixed}.")
        rest = list(given) if given else dims[1:]
        if given and len(given) == len(dims[1:]) and any(d is not None and d != g for d, g in zip(dims[1:], given)):
            raise EdgesmithError(f"--input-shape {','.join(map(str, given))} does not match input {name!r} "
                                 f"({', '.join('?' if d is None else str(d) for d in dims[1:])}).",
                                 "give the input's own shape (dynamic dimensions may take any size).")
        if any(d is None for d in rest):
            raise EdgesmithError(f"input {name!r} has dynamic dimensions ({', '.join('?' if d is None else str(d) for d in dims[1:])}).",
                                 f"pass --input-shape {name}=D,... with the sizes to time (per sample, without the batch).")
        shape = (batch, *rest)
        out[name] = synthetic_array(name, dtype, shape, rng, {})
    return out


def cmd_bench(args) -> int:
    import onnx

    from edgesmith.bench.measure.latency import measure_isolated_sets
    from edgesmith.bench.sources.base import parse_input_shapes

    if args.out:  # before measuring, not after
        check_output(args.out, force=args.force, folder=False)
    batches = args.batch or [1]
    if any(b < 1 for b in batches):
        raise EdgesmithError(f"--batch {min(batches)} is not a positive batch size.", "use e.g. --batch 1 --batch 64.")
    if any(b > 1_000_000 for b in batches):
        raise EdgesmithError(f"--batch {max(batches)} is larger than edgesmith times (1,000,000).", "use a smaller batch.")
    art = api.onnx_artifact(Path(args.artifact))
    model = onnx.load(str(art.path), load_external_data=False)
    shapes, types = parse_input_shapes(args.input_shape)
    threads = args.threads or os.cpu_count() or 1
    rt_opts = {"tune_trials": args.tune_trials} if args.runtime == "tvm" else {}
    feeds = {b: bench_inputs(model, shapes, b, args.seed, types) for b in batches}  # every shape checked first
    nbytes = max(sum(x.nbytes for x in f.values()) for f in feeds.values())
    art.meta["input_shape"] = None
    rows = []
    ascending = sorted(feeds)  # one fresh process times every batch size, smallest first (each peak RSS its own)
    sets = [feeds[b] if len(feeds[b]) > 1 else next(iter(feeds[b].values())) for b in ascending]
    timed = dict(zip(ascending, measure_isolated_sets(args.runtime, art, sets, threads=threads, warmup=args.warmup,
                                                      reps=args.reps, runtime_options=rt_opts)))
    for b in feeds:
        res = timed[b]
        rows.append({"batch": b, **res.to_dict()})
        lat = res.latency
        print(f"{args.runtime} batch {b}: p50 {lat.p50 * 1e3:.4f} ms, p90 {lat.p90 * 1e3:.4f} ms, "
              f"p99 {lat.p99 * 1e3:.4f} ms, cv {lat.cv:.2f}, n {lat.n}, threads {threads} (measured, fresh process)")
    if args.out:
        write_json(args.out, {"artifact": args.artifact, "runtime": args.runtime, "input_bytes": nbytes,
                              "results": rows}, force=args.force)
        print(f"wrote {args.out}")
    return 0


# --- deploy / demo --------------------------------------------------------------------------------------


def cmd_deploy(args) -> int:
    from edgesmith.bench.pipeline.deploy import deploy

    from edgesmith.bench.report.schema import DeployReport

    recipe = load_recipe(args.recipe)
    out = deploy(deploy_options(args, recipe))
    report = DeployReport.load(out / "report.json")
    for name, why in report.plan.not_built.items():
        print(f"not built: {name}: {why}")  # a variant the user may have expected, said where they look
    for f in report.failed_runs:
        print(f"failed: {f.variant} ({f.runtime_label}): {f.error}")
    print(f"report: {out / 'report.md'}")
    return 0


def cmd_demo(args) -> int:
    from edgesmith.bench.demo import DEMO_RECIPE, run_demo

    out = run_demo(Path(args.recipe or DEMO_RECIPE), Path(args.out), force=args.force, progress=not args.quiet,
                   tune_trials=args.tvm_tune_trials)
    print(f"demo summary: {out / 'summary.md'}")
    return 0


def cmd_setup(args) -> int:
    from edgesmith.bench.setup_env import setup_lava
    from edgesmith.common import LAVA_ENV_VAR, lava_python

    py = setup_lava(args.into, args.python, args.quiet)
    found = Path(py) == lava_python()
    print(f"Lava environment ready: {py}" + ("" if found else f" (point {LAVA_ENV_VAR} at it to use it)"))
    return 0


def cmd_sweep(args) -> int:
    from edgesmith.bench.sweep import run_sweep

    report = run_sweep(args.recipe, args.out, workers=args.workers, ray=args.ray, force=args.force,
                       progress=not args.quiet, yes=args.yes)
    failed = report["run"]["failed"]
    if failed:
        print(f"edgesmith: {failed} cell(s) failed (see the sweep report); run the same command again to retry them.",
              file=sys.stderr)
    return 1 if failed else 0


# --- parser -------------------------------------------------------------------------------------------


def _add_input_shape_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", dest="input_shape", action="append", metavar="[NAME=]D,D,...[:TYPE]",
                   help="per-sample input shape (and type, float32 by default: ids=16:int64) to trace a torch model "
                        "without data (repeatable per input)")


TRUST_HELP = ("allow a model file that needs unpickling (a torch.save'd module, a .pt2 or .pth with pickled members): "
              "unpickling runs code from the file, so only for files you trust. A file.py:factory always runs your code")


def _add_deploy_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="report folder (default runs/MODEL-TARGET)")
    p.add_argument("--force", action="store_true", help="replace an existing output folder")
    p.add_argument("--recipe", help="TOML recipe (model, target, [plan], [bench], [options], [model_options])")
    p.add_argument("--seed", type=int)
    p.add_argument("--threads", type=int, help="threads for every runtime (default: all cores)")
    p.add_argument("--batch", type=int, action="append", help="batch size to time (repeatable; default: the kind's)")
    p.add_argument("--warmup", type=int)
    p.add_argument("--reps", type=int, help="the most timed calls per batch size (default 200)")
    p.add_argument("--latency-precision", dest="latency_precision", type=float,
                   help="stop timing a batch size once its p50 is known to this fraction (default 0.03, i.e. +-3%%; "
                        "0 times every --reps call)")
    p.add_argument("--n-calibration", dest="n_calibration", type=int, help="calibration samples (default: the kind's)")
    p.add_argument("--calibration-select", dest="calibration_select",
                   help="how calibration samples are chosen: first (default), random or influence")
    p.add_argument("--tvm-tune-trials", dest="tvm_tune_trials", type=int,
                   help="also run TVM tuned with this many fresh MetaSchedule trials")
    p.add_argument("--tvm-records", dest="tvm_records", action="store_true",
                   help="also a TVM row scheduled from tuning records (shipped, or cached by an earlier tune)")
    p.add_argument("--tvm", dest="tvm", action="store_true",
                   help="also untuned TVM rows (by default TVM runs only with --tvm-records or --tvm-tune-trials)")
    p.add_argument("--no-tvm", dest="no_tvm", action="store_true", help="leave every TVM row out")
    p.add_argument("--variant", action="append", help="only these variants (repeatable)")
    p.add_argument("--max-drop", dest="max_drop", metavar="DROP",
                   help="choose the artifact to ship: the task metric may fall at most this far below fp32's, "
                        "1%% (relative) or 0.01 (in the metric's units); writes decision.md and chosen/")
    p.add_argument("--min-sqnr", dest="min_sqnr", type=float, metavar="DB",
                   help="choose the artifact to ship: output SQNR against fp32 of at least DB (models without labels)")
    p.add_argument("--allow-qat", dest="allow_qat", action="store_true",
                   help="with a budget: if no post-training candidate meets it, also train QAT variants (3 epochs)")
    p.add_argument("--objective", choices=["latency", "energy", "size", "memory"],
                   help="what the choice minimises within the budget (default latency, at the first --batch)")
    p.add_argument("--runtime", action="append", metavar="NAME",
                   help="also time each variant in this runtime, e.g. openvino (host-cpu; repeatable; `edgesmith runtimes`)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="option of the model's kind, e.g. prune_sparsity=0.5 (see `edgesmith kinds`; repeatable)")
    p.add_argument("--model-option", dest="model_option", action="append", metavar="KEY=VALUE",
                   help="argument of the model's producer or option of its model source, e.g. tiny=true (repeatable)")
    p.add_argument("--calibration-data", dest="calibration_data",
                   help="your calibration inputs: .npy (one input), .npz (one array per input name), a folder of them, "
                        "or UTF-8 text for token-lm models")
    p.add_argument("--eval-data", dest="eval_data", help="your evaluation inputs (same forms), labels optional inside")
    p.add_argument("--train-data", dest="train_data",
                   help="your training inputs for QAT (same forms, labels optional inside: cross-entropy on them; "
                        "without labels QAT distils the float model)")
    p.add_argument("--labels", help=".npy of labels (class ids) or targets for --eval-data")
    p.add_argument("--metric", help="accuracy, topK (top5), binary (a probability per position vs 0/1 labels), mse, mae, "
                                     "perplexity or fidelity (default without labels)")
    _add_input_shape_flag(p)
    p.add_argument("--sensitivity", action="store_true", help="per-layer sensitivity table for quantizing passes")
    p.add_argument("--trust-model-file", dest="trust_model_file", action="store_true", help=TRUST_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _export_formats() -> list[tuple[str, str]]:
    """(suffix, description) of each format ``export`` writes with a pass of its own (compress.formats)."""
    from edgesmith.compress.formats import FORMATS

    return [(f.suffixes[0], f.description) for f in map(FORMATS.get, FORMATS.names()) if f.export_pass and f.suffixes]


def build_parser() -> argparse.ArgumentParser:
    from edgesmith import __version__

    ap = argparse.ArgumentParser(prog="edgesmith", description="Compress, export, run and measure models for edge targets.")
    ap.add_argument("--version", action="version", version=f"edgesmith {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("targets", help="list targets with their model kinds and cost-model coefficients")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_targets)

    sub.add_parser("models", help="list model producers and their kinds").set_defaults(func=cmd_models)
    sub.add_parser("kinds", help="list model kinds and their options").set_defaults(func=cmd_kinds)
    sub.add_parser("passes", help="list compression/export passes and their options").set_defaults(func=cmd_passes)
    sub.add_parser("runtimes", help="list runtimes, the formats they load and whether they run here"
                   ).set_defaults(func=cmd_runtimes)

    p = sub.add_parser("export", help="write a model to a file: FILE.onnx with its kind's export pass, or "
                                      + ", ".join(f"FILE{s} ({d})" for s, d in _export_formats()))
    p.add_argument("model")
    p.add_argument("--out", required=True, help="the output file; its name picks the format: "
                                                + ", ".join(["FILE.onnx"] + [f"FILE{s}" for s, _ in _export_formats()]))
    p.add_argument("--dtype", default=None, help="weights of an official .pth: fp16 (default), bf16 or fp32")
    p.add_argument("--opset", type=int)
    p.add_argument("--seed", type=int, default=0)
    _add_input_shape_flag(p)
    p.add_argument("--example-data", dest="example_data",
                   help="example inputs (.npy, .npz named by input, or a folder of them) to trace a torch model "
                        "(file.py:factory, .pt, .pt2) with, instead of --input-shape")
    p.add_argument("--model-option", dest="model_option", action="append", metavar="KEY=VALUE")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="an option of the kind's export pass, e.g. batch=1 (a static decode graph) or vq_form=int8")
    p.add_argument("--trust-model-file", dest="trust_model_file", action="store_true", help=TRUST_HELP)
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("quantize", help="apply one compression pass to a producer's model or a model file")
    p.add_argument("model", help="a model name (see `edgesmith models`), an .onnx file, or another model file "
                                 "deploy reads (a .pth checkpoint, file.py:factory, ...)")
    p.add_argument("--pass", dest="pass_kind", default="int8-qdq", help="pass kind (see `edgesmith passes`)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="pass option (repeatable)")
    p.add_argument("--model-option", dest="model_option", action="append", metavar="KEY=VALUE",
                   help="argument of the model's producer (repeatable)")
    p.add_argument("--trust-model-file", dest="trust_model_file", action="store_true", help=TRUST_HELP)
    p.add_argument("--calibration-data", dest="calibration_data",
                   help="calibration inputs: .npy / .npz / a folder of them, or UTF-8 text for a language model's checkpoint")
    p.add_argument("--eval-data", dest="eval_data",
                   help="a model file's evaluation data (same forms) to score the written file on")
    p.add_argument("--n-calibration", dest="n_calibration", type=int)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    _add_input_shape_flag(p)
    p.add_argument("--sensitivity", action="store_true")
    p.add_argument("--force", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("bench", help="time an ONNX model in a runtime (fresh process)")
    p.add_argument("artifact")
    p.add_argument("--runtime", default="onnxruntime", choices=["onnxruntime", "openvino", "tvm"])
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--tune-trials", dest="tune_trials", type=int, default=0)
    p.add_argument("--input-shape", dest="input_shape", action="append", metavar="[NAME=]D,D,...",
                   help="per-sample shape of a dynamic input, e.g. 3,32,32 or ids=128 (repeatable; the graph gives "
                        "the type)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the results as JSON")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("deploy", help="run a target's whole plan for a model and write a report folder")
    p.add_argument("model", nargs="?", help="a producer name (`edgesmith models`) or your model: model.onnx, "
                                            "file.py:factory (imports and runs that file: your code), model.pt "
                                            "(TorchScript), model.pt2 (torch.export), an "
                                            ".pth checkpoint, a saved tree ensemble .npz, a netx network .net/.h5 (or set it in --recipe)")
    p.add_argument("--target", help="target name (see `edgesmith targets`)")
    _add_deploy_flags(p)
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("sweep", help="run a grid of deploys in parallel (or on Ray), cached per cell, resumable, "
                                     "merged into one report with Pareto fronts")
    p.add_argument("recipe", help="sweep recipe (TOML): deploy keys shared by every cell, [grid], [[cell]], [sweep]")
    p.add_argument("--out", help="sweep folder (default: the recipe's [sweep] out, else runs/sweeps/NAME); reused "
                                 "on a rerun, its finished cells kept")
    p.add_argument("--workers", type=int, help="cells at a time on this machine (default: one per core)")
    p.add_argument("--ray", metavar="auto|ADDRESS|local",
                   help="run the cells as Ray tasks: auto (the cluster started by `ray start`), an address, or local "
                        "(a Ray instance of this process)")
    p.add_argument("--force", action="store_true", help="run every cell again, finished ones too")
    p.add_argument("--yes", action="store_true", help="run a grid of more than 1,000 cells")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("setup", help="build an optional environment: lava (Python 3.10 with lava-nc 0.10 and lava-dl 0.6, "
                                     "which the loihi2 target runs out of process; about 5.6 GB)")
    p.add_argument("what", choices=["lava"])
    p.add_argument("--into", help="the environment's folder (default: .venv-lava in a checkout, else beside the cache)")
    p.add_argument("--python", help="the Python 3.10 to build it with (default: python3.10 on PATH, or pyenv's)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("demo", help="run the demo recipe's deploys and summarise them")
    p.add_argument("--recipe", help="a recipe with [[deploy]] tables (default: the shipped bench/recipes/demo.toml)")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--force", action="store_true")
    p.add_argument("--tvm-tune-trials", dest="tvm_tune_trials", type=int, default=0,
                   help="fresh MetaSchedule trials for TVM (default 0: shipped tuning records only)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_demo)

    from edgesmith.bench.apps import APPS  # each app adds its own command (bench/apps/)

    for name in APPS.names():
        app = APPS.get(name)
        p = sub.add_parser(app.name, help=app.help)
        app.add_arguments(p)
        p.set_defaults(func=app.run)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            # numpy's overflow and invalid-value notes (and torch's on a pickle protocol) are a developer's, not the
            # user's: results are checked for NaN and range explicitly, and an error is one line
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.filterwarnings("ignore", message=".*pickle protocol.*", category=UserWarning)
            return args.func(args)
    except EdgesmithError as e:
        print(f"edgesmith: {'interrupted' if isinstance(e, Interrupted) else 'error'}: {e.problem}", file=sys.stderr)
        if e.fix:
            print(f"  fix: {e.fix}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("edgesmith: interrupted; nothing was written to the output path.", file=sys.stderr)
        return 130
    except SystemExit as e:  # argparse is done: this is a user's factory or training code calling sys.exit
        print(f"edgesmith: error: the model's own code called sys.exit({e.code!r}); nothing was written.",
              file=sys.stderr)
        print("  fix: let the factory return the model (and raise, not exit, on a problem).", file=sys.stderr)
        return 2
    except MemoryError:
        print("edgesmith: error: the machine ran out of memory.", file=sys.stderr)
        print("  fix: use smaller batches, fewer calibration samples or a smaller model; nothing was written.",
              file=sys.stderr)
        return 2
    except OSError as e:  # a full disk or a forbidden folder met outside an output write: still the user's to fix
        from edgesmith.common import WRITE_ERRNOS

        if e.errno not in WRITE_ERRNOS:
            return _internal(e)
        what, fix = WRITE_ERRNOS[e.errno]
        print(f"edgesmith: error: {what} ({e.filename or e.strerror}).", file=sys.stderr)
        print(f"  fix: {fix}.", file=sys.stderr)
        return 2
    except Exception as e:
        return _internal(e)


def _internal(e: BaseException) -> int:
    """A fault of edgesmith's own, not the user's: one line and how to get the traceback (EDGESMITH_DEBUG=1)."""
    if os.environ.get("EDGESMITH_DEBUG", "") not in ("", "0"):
        raise e
    from edgesmith.common import raised

    print(f"edgesmith: internal error: {raised(e, 300)}", file=sys.stderr)
    print("  fix: this is edgesmith's fault, not yours: run again with EDGESMITH_DEBUG=1 for the traceback and "
          "report it; nothing was written.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
