"""The ``edgesmith`` command line.

    edgesmith targets                      targets, formats, budgets, cost-model coefficients + sources
    edgesmith models                       registered model producers
    edgesmith passes                       registered compression/export passes and their options
    edgesmith export MODEL --out F.onnx    export a producer's model to ONNX
    edgesmith quantize MODEL|F.onnx --pass int8-qdq --out F.onnx   one compression pass + its report
    edgesmith bench F.onnx --runtime onnxruntime --batch 1         latency in a fresh process
    edgesmith deploy MODEL --target T --out DIR                    the target's whole plan -> report folder
    edgesmith deploy lrnn --target loihi2 --out DIR                sparse fixed-point denoiser in Lava vs Jetson
    edgesmith demo --out DIR               deploy digits-mlp to every target, with a summary
    edgesmith quantize rwkv --method rwkvquant --bits 3 --out q.pth   RWKV checkpoint + report (bench.rwkv)
    edgesmith deploy rwkv --target host-cpu --out DIR                  RWKV perplexity table + decode speed

Options come from flags or from a TOML recipe (``--recipe``); flags win. User errors print one
line (problem and fix) and exit with status 2; they never print a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import shutil
import tempfile
import tomllib
from pathlib import Path

from edgesmith.hardware.base import PlanOptions
from edgesmith.common import EdgesmithError, atomic_path, write_json

RECIPE_KEYS = {
    "top": {"model", "target", "out", "seed", "threads", "force", "sensitivity"},
    "plan": {f.name for f in dataclasses.fields(PlanOptions)},
    "bench": {"batch_sizes", "warmup", "reps", "n_calibration", "calibration_select"},
}


def _load_recipe(path: str | None) -> dict:
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise EdgesmithError(f"recipe file {p} does not exist.", "check the --recipe path.")
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise EdgesmithError(f"recipe {p} is not valid TOML: {e}.", "fix the syntax (see README for an example).") from None
    for section, keys in (("plan", RECIPE_KEYS["plan"]), ("bench", RECIPE_KEYS["bench"])):
        unknown = set(data.get(section, {})) - keys
        if unknown:
            raise EdgesmithError(f"recipe {p}: unknown [{section}] key(s) {', '.join(sorted(unknown))}.",
                                 f"valid keys: {', '.join(sorted(keys))}.")
    unknown = set(data) - RECIPE_KEYS["top"] - {"plan", "bench", "model_options"}
    if unknown:
        raise EdgesmithError(f"recipe {p}: unknown key(s) {', '.join(sorted(unknown))}.",
                             f"valid top-level keys: {', '.join(sorted(RECIPE_KEYS['top']))}, [plan], [bench], "
                             "[model_options].")
    return data


# --- commands ---------------------------------------------------------------------------------------


def cmd_targets(args) -> int:
    from edgesmith.hardware import get_target, target_names

    descs = [get_target(n).describe() for n in target_names()]
    if args.json:
        print(json.dumps(descs, indent=2))
        return 0
    for d in descs:
        print(f"{d['name']}: {d['description']}")
        print(f"  formats: {', '.join(d['numeric_formats'])}; runtime: {d['runtime']}; export: {d['export_format']}; "
              f"latency: {d['latency_provenance']}")
        print(f"  memory budget: {d['memory_budget_bytes'] / 2**20:,.0f} MiB ({d['memory_budget_source']})")
        print(f"  cost model: {d['cost_model']}")
        for c in d["coefficients"]:
            print(f"    {c['name']} = {c['value']:g} {c['unit']}  [{c['source']}]" + (f" ({c['note']})" if c.get("note") else ""))
        print()
    return 0


def cmd_models(args) -> int:
    from edgesmith.models import get_producer, producer_names

    for n in producer_names():
        p = get_producer(n)
        print(f"{n}: {p.description}  (input {tuple(p.input_shape)}, metric {p.metric.name})")
    return 0


def cmd_passes(args) -> int:
    from edgesmith.compress.base import pass_config_type, pass_kinds

    for k in pass_kinds():
        cls = pass_config_type(k)
        opts = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls))
        print(f"{k}: {cls.input_format} -> {cls.output_format}; options: {opts or '(none)'}")
    return 0


def _producer_artifact(model: str, seed: int):
    from edgesmith.compress import Artifact
    from edgesmith.models import get_producer

    producer = get_producer(model, seed=seed).build()
    return producer, Artifact("torch", module=producer.module, meta={"input_shape": list(producer.input_shape)})


def _onnx_artifact(path: Path):
    import onnx

    from edgesmith.compress import Artifact

    if not path.is_file():
        raise EdgesmithError(f"model file {path} does not exist.", "check the path.")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises DecodeError, ValidationError, ...: all mean a bad file
        raise EdgesmithError(f"{path} is not a valid ONNX model ({type(e).__name__}).",
                             "re-export it, or check that the file was copied completely.") from None
    dims = model.graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value if d.dim_value > 0 else None for d in dims[1:]]
    return Artifact("onnx", path=path, meta={"input_shape": shape if None not in shape else None,
                                             "input_name": model.graph.input[0].name})


def _load_calibration(path: str | None, n: int):
    import numpy as np

    from edgesmith.common import check_finite_array

    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise EdgesmithError(f"calibration file {p} does not exist.", "pass a .npy array of input samples.")
    try:
        x = np.load(p, allow_pickle=False)
    except Exception:
        raise EdgesmithError(f"calibration file {p} is not a readable .npy array.", "save it with numpy.save.") from None
    return check_finite_array(x.astype(np.float32)[:n], "calibration data")


def cmd_export(args) -> int:
    from edgesmith.compress import PassContext, run_passes
    from edgesmith.compress.export_onnx import ExportOnnxConfig

    out = Path(args.out)
    if out.exists() and not args.force:
        raise EdgesmithError(f"{out} already exists.", "choose another --out or pass --force.")
    producer, art = _producer_artifact(args.model, args.seed)
    with tempfile.TemporaryDirectory() as work:
        onnx_art, _ = run_passes(art, [ExportOnnxConfig(opset=args.opset)], PassContext(
            workdir=Path(work), example_input=producer.example_inputs(1), seed=args.seed))
        with atomic_path(out, force=args.force) as tmp:
            shutil.copyfile(onnx_art.path, tmp)
    print(f"wrote {out}")
    return 0


def cmd_quantize(args) -> int:
    from edgesmith.compress import PassContext, config_from_dict, run_passes
    from edgesmith.compress.export_onnx import ExportOnnxConfig

    if args.model == "rwkv":  # a language model with a recurrent state: its own quantizers and report
        from edgesmith.bench.rwkv import quantize_rwkv_cli

        quantize_rwkv_cli(args.rwkv_model, method=args.method, bits=args.bits, out=args.out,
                          group_size=args.group_size, sq_percentile=args.sq_percentile,
                          n_calibration=args.n_calibration, seed=args.seed, force=args.force, progress=not args.quiet,
                          threads=args.threads)
        return 0
    out = Path(args.out)
    report_path = out.with_suffix(out.suffix + ".report.json")
    for p in (out, report_path):
        if p.exists() and not args.force:
            raise EdgesmithError(f"{p} already exists.", "choose another --out or pass --force.")
    options = {}
    for kv in args.option or []:
        if "=" not in kv:
            raise EdgesmithError(f"--option {kv!r} is not KEY=VALUE.", "write e.g. --option calibration=percentile.")
        k, v = kv.split("=", 1)
        try:
            options[k] = json.loads(v)
        except json.JSONDecodeError:
            options[k] = v
    config = config_from_dict({"kind": args.pass_kind, **options})
    calib = _load_calibration(args.calibration_data, args.n_calibration)
    model_path = Path(args.model)
    if args.model.endswith(".onnx") or model_path.exists():
        art = _onnx_artifact(model_path)
        producer = None
        passes = [config]
        example = None
    else:
        producer, art = _producer_artifact(args.model, args.seed)
        calib = calib if calib is not None else producer.calibration_data(args.n_calibration)
        example = producer.example_inputs(1)
        passes = [ExportOnnxConfig(), config] if config.input_format == "onnx" else [config]
        if passes[-1].output_format == "torch":  # e.g. pruning: export the result so there is a file
            passes.append(ExportOnnxConfig())
    if passes[-1].output_format != "onnx":
        raise EdgesmithError(f"pass {config.kind!r} does not produce an ONNX file.",
                             "use `edgesmith deploy` for passes that produce other formats.")
    with tempfile.TemporaryDirectory() as work:
        ctx = PassContext(workdir=Path(work), calibration=calib, example_input=example, seed=args.seed,
                          sensitivity=args.sensitivity, progress=not args.quiet)
        if args.sensitivity and producer is not None:
            from edgesmith.bench.deploy import _artifact_scorer

            ctx.evaluate = _artifact_scorer(producer, os.cpu_count() or 1)
        result, reports = run_passes(art, passes, ctx)
        with atomic_path(out, force=args.force) as tmp:
            shutil.copyfile(result.path, tmp)
        write_json(report_path, {"input": args.model, "output": str(out), "passes": [r.to_dict() for r in reports]},
                   force=args.force)
    final = next(r for r in reports if r.config["kind"] == config.kind)  # the user's pass, not the export
    print(f"wrote {out} ({final.size_before_bytes:,} -> {final.size_after_bytes:,} bytes"
          + (f", {final.bits_per_weight:.2f} bits/weight" if final.bits_per_weight else "") + f"); report {report_path}")
    if producer is not None:
        from edgesmith.compress import Artifact
        from edgesmith.runtimes import get_runtime

        rt = get_runtime("onnxruntime").load(Artifact("onnx", path=out, meta=dict(result.meta)))
        ev = producer.evaluate(lambda x: rt.run(x).outputs)
        print(f"{ev.metric.name} ({ev.n_samples} held-out samples): {ev.value:.4f}")
    return 0


def cmd_bench(args) -> int:
    import numpy as np

    from edgesmith.bench.latency import measure_isolated

    art = _onnx_artifact(Path(args.artifact))
    shape = art.meta.get("input_shape")
    if args.input_shape:
        try:
            given = [int(s) for s in args.input_shape.split(",")]
        except ValueError:
            raise EdgesmithError(f"--input-shape {args.input_shape!r} is not a list of integers.",
                                 "write it like 64 or 3,32,32.") from None
        if shape and given != list(shape):
            raise EdgesmithError(f"--input-shape {given} does not match the model's input shape {list(shape)}.",
                                 f"use --input-shape {','.join(map(str, shape))} or omit it.")
        shape = given
    if not shape:
        raise EdgesmithError("the model's input shape has symbolic dimensions.", "pass --input-shape, e.g. 64 or 3,32,32.")
    art.meta["input_shape"] = shape
    rows = []
    threads = args.threads or os.cpu_count() or 1
    rt_opts = {"tune_trials": args.tune_trials} if args.runtime == "tvm" else {}
    for b in args.batch or [1]:
        x = np.random.default_rng(args.seed).standard_normal((b, *shape)).astype(np.float32)
        res = measure_isolated(args.runtime, art, x, threads=threads, warmup=args.warmup, reps=args.reps,
                               runtime_options=rt_opts)
        rows.append({"batch": b, **res.to_dict()})
        lat = res.latency
        print(f"{args.runtime} batch {b}: p50 {lat.p50 * 1e3:.4f} ms, p90 {lat.p90 * 1e3:.4f} ms, "
              f"p99 {lat.p99 * 1e3:.4f} ms, cv {lat.cv:.2f}, n {lat.n}, threads {threads} (measured, fresh process)")
    if args.out:
        write_json(args.out, {"artifact": args.artifact, "runtime": args.runtime, "results": rows}, force=args.force)
        print(f"wrote {args.out}")
    return 0


def _deploy_options(args, recipe: dict):
    from edgesmith.bench.deploy import DeployOptions
    from edgesmith.hardware import PlanOptions

    plan_kw = dict(recipe.get("plan", {}))
    bench_kw = dict(recipe.get("bench", {}))
    for name in ("calibration", "percentile", "int4_block_size", "prune_sparsity", "tvm_tune_trials"):
        v = getattr(args, name, None)
        if v is not None:
            plan_kw[name] = v
    if getattr(args, "no_tvm", False):
        plan_kw["tvm"] = False
    if getattr(args, "variant", None):
        plan_kw["variants"] = tuple(args.variant)
    if "variants" in plan_kw:
        plan_kw["variants"] = tuple(plan_kw["variants"])
    if args.batch:
        bench_kw["batch_sizes"] = tuple(args.batch)
    if "batch_sizes" in bench_kw:
        bench_kw["batch_sizes"] = tuple(bench_kw["batch_sizes"])
    for name in ("warmup", "reps", "n_calibration", "calibration_select"):
        v = getattr(args, name, None)
        if v is not None:
            bench_kw[name] = v
    top = {k: recipe[k] for k in ("seed", "threads", "force", "sensitivity") if k in recipe}
    for name in ("seed", "threads"):
        v = getattr(args, name, None)
        if v is not None:
            top[name] = v
    if args.force:
        top["force"] = True
    if args.sensitivity:
        top["sensitivity"] = True
    model = getattr(args, "model", None) or recipe.get("model")
    target = getattr(args, "target", None) or recipe.get("target")
    out = args.out or recipe.get("out") or f"runs/{model}-{target}"
    if not model:
        raise EdgesmithError("no model given.", "pass MODEL or set model in the recipe.")
    if not target:
        raise EdgesmithError("no target given.", "pass --target or set target in the recipe.")
    try:
        plan = PlanOptions(**plan_kw)
    except TypeError as e:
        raise EdgesmithError(f"bad plan option: {e}.", "see `edgesmith deploy --help`.") from None
    model_options = dict(recipe.get("model_options", {}))
    model_options.update(parse_model_options(getattr(args, "model_option", None) or []))
    return DeployOptions(model=model, target=target, out=Path(out), plan=plan, progress=not args.quiet,
                         model_options=model_options, **bench_kw, **top)


def parse_model_options(items: list[str]) -> dict:
    """``KEY=VALUE`` strings -> keyword arguments; VALUE is read as JSON (true, 3, 0.5, "x") or else kept as text."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise EdgesmithError(f"--model-option {item!r} is not KEY=VALUE.", "write it like --model-option tiny=true.")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def cmd_deploy(args) -> int:
    from edgesmith.bench.deploy import deploy

    if args.model == "rwkv":  # perplexity + decode speed, not the classifier pipeline
        from edgesmith.bench.rwkv import deploy_rwkv, options_from_args

        print(f"report: {deploy_rwkv(options_from_args(args)) / 'report.md'}")
        return 0
    if args.model == "lrnn":  # streaming denoiser: prune -> fixed point -> Lava, with its own plan
        return _deploy_lrnn(args)
    if args.quick:
        raise EdgesmithError("--quick applies only to `deploy rwkv` and `deploy lrnn`.",
                             "use --reps/--batch to shorten other deploys.")
    recipe = _load_recipe(args.recipe)
    opts = _deploy_options(args, recipe)
    out = deploy(opts)
    print(f"report: {out / 'report.md'}")
    return 0


def _deploy_lrnn(args) -> int:
    from edgesmith.bench.benchmarks.lrnn_deploy import LrnnPlan, deploy_lrnn

    if args.target not in (None, "loihi2"):
        raise EdgesmithError(f"`deploy lrnn` targets loihi2 (with the Jetson comparison inside), not {args.target!r}.",
                             "use --target loihi2.")
    out = Path(args.out or "runs/lrnn-loihi2")
    plan = LrnnPlan(quick=args.quick, lava_clips=args.lava_clips, sweep=not args.no_sweep)
    sweep_from = Path(args.sweep_from) if args.sweep_from else None
    log = (lambda *a, **k: None) if args.quiet else print
    print(f"report: {deploy_lrnn(out, plan, force=args.force, sweep_from=sweep_from, log=log) / 'report.md'}")
    return 0


def cmd_demo(args) -> int:
    from edgesmith.bench.demo import run_demo

    out = run_demo(Path(args.out), force=args.force, quick=args.quick, progress=not args.quiet,
                   tune_trials=args.tvm_tune_trials)
    print(f"demo summary: {out / 'summary.md'}")
    return 0


# --- parser -------------------------------------------------------------------------------------------


def _add_deploy_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="report folder (default runs/MODEL-TARGET)")
    p.add_argument("--force", action="store_true", help="replace an existing output folder")
    p.add_argument("--recipe", help="TOML recipe with model/target/[plan]/[bench] (flags override it)")
    p.add_argument("--seed", type=int)
    p.add_argument("--threads", type=int, help="threads for every runtime (default: all cores)")
    p.add_argument("--batch", type=int, action="append", help="batch size to time (repeatable; default 1 and 64)")
    p.add_argument("--warmup", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--n-calibration", dest="n_calibration", type=int)
    p.add_argument("--calibration-select", dest="calibration_select",
                   help="how calibration samples are chosen: first (default), random or influence")
    p.add_argument("--calibration", choices=["minmax", "percentile"], help="int8 activation calibration")
    p.add_argument("--percentile", type=float)
    p.add_argument("--int4-block-size", dest="int4_block_size", type=int)
    p.add_argument("--prune-sparsity", dest="prune_sparsity", type=float, help="add a pruned+int8 variant")
    p.add_argument("--tvm-tune-trials", dest="tvm_tune_trials", type=int, help="also run MetaSchedule-tuned TVM")
    p.add_argument("--no-tvm", dest="no_tvm", action="store_true")
    p.add_argument("--variant", action="append", help="only these variants (repeatable)")
    p.add_argument("--model-option", dest="model_option", action="append", metavar="KEY=VALUE",
                   help="keyword argument of the model's producer, e.g. tiny=true (repeatable)")
    p.add_argument("--sensitivity", action="store_true", help="per-layer sensitivity table for quantizing passes")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="edgesmith", description="Compress, export, run and measure models for edge targets.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("targets", help="list targets with their cost-model coefficients and sources")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_targets)

    sub.add_parser("models", help="list model producers").set_defaults(func=cmd_models)
    sub.add_parser("passes", help="list compression/export passes and their options").set_defaults(func=cmd_passes)

    p = sub.add_parser("export", help="export a producer's model to ONNX")
    p.add_argument("model")
    p.add_argument("--out", required=True)
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("quantize", help="apply one compression pass to a producer's model or an ONNX file")
    p.add_argument("model", help="a model name (see `edgesmith models`) or a path to an .onnx file")
    p.add_argument("--pass", dest="pass_kind", default="int8-qdq", help="pass kind (see `edgesmith passes`)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="pass option (repeatable)")
    p.add_argument("--calibration-data", dest="calibration_data", help=".npy of calibration inputs (ONNX files)")
    p.add_argument("--n-calibration", dest="n_calibration", type=int, default=128)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sensitivity", action="store_true")
    p.add_argument("--force", action="store_true")
    p.add_argument("--quiet", action="store_true")
    rw = p.add_argument_group("MODEL rwkv (ignored for other models)")
    rw.add_argument("--method", help="rtn, gptq, gptvq or rwkvquant (default rwkvquant)")
    rw.add_argument("--bits", help="3 or 4 (default 3)")
    rw.add_argument("--rwkv-model", dest="rwkv_model", default="rwkv7-ref",
                    help="rwkv6-ref, rwkv7-ref (default) or the path of an official-layout RWKV-6/7 .pth")
    rw.add_argument("--group-size", dest="group_size", type=int, help="scalar-quantization group (default 64)")
    rw.add_argument("--sq-percentile", dest="sq_percentile", type=float,
                    help="RWKVQuant proxy threshold percentile (default 90)")
    rw.add_argument("--threads", type=int, default=1, help="torch threads while quantizing (default 1)")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("bench", help="time an ONNX model in a runtime (fresh process)")
    p.add_argument("artifact")
    p.add_argument("--runtime", default="onnxruntime", choices=["onnxruntime", "tvm"])
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--tune-trials", dest="tune_trials", type=int, default=0)
    p.add_argument("--input-shape", dest="input_shape", help="per-sample shape, e.g. 64 or 3,32,32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the results as JSON")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("deploy", help="run a target's whole plan for a model and write a report folder")
    p.add_argument("model", nargs="?", help="model name (or set it in --recipe)")
    p.add_argument("--target", help="target name (see `edgesmith targets`)")
    _add_deploy_flags(p)
    p.add_argument("--quick", action="store_true", help="rwkv only: one model, fewer eval bytes, small decode model")
    p.add_argument("--lava-clips", dest="lava_clips", type=int, help="lrnn only: test clips simulated in Lava")
    p.add_argument("--no-sweep", dest="no_sweep", action="store_true", help="lrnn only: skip the width x sparsity sweep")
    p.add_argument("--sweep-from", dest="sweep_from", help="lrnn only: reuse a finished lrnn_sweep folder")
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("demo", help="deploy digits-mlp to every target and summarise")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--force", action="store_true")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (for smoke tests)")
    p.add_argument("--tvm-tune-trials", dest="tvm_tune_trials", type=int, default=8)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EdgesmithError as e:
        print(f"edgesmith: error: {e.problem}", file=sys.stderr)
        if e.fix:
            print(f"  fix: {e.fix}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("edgesmith: interrupted; nothing was written to the output path.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
