"""The Python API, ``import edgesmith``: the command line's commands as functions.

    import edgesmith
    out = edgesmith.deploy("digits-mlp", target="host-cpu", out="runs/digits")        # -> report folder
    out = edgesmith.deploy("digits-wide", target="jetson-orin-nano", variants=["fp32", "int8"], out="runs/wide")
    edgesmith.quantize("digits-mlp", "int8-qdq", out="m.int8.onnx")                     # -> written file
    edgesmith.export("digits-mlp", out="digits.onnx")
    edgesmith.targets(); edgesmith.producers(); edgesmith.passes(); edgesmith.kinds()

Arguments mirror the flags (``options`` = ``--option``, ``model_options`` = ``--model-option``); errors
a user can fix raise ``edgesmith.EdgesmithError`` with ``problem`` and ``fix``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError, NoEvaluationData, atomic_files, check_seed, scratch_dir
from edgesmith.common.checks import is_int


def _table(value, name: str) -> dict:
    """``value`` (None or a mapping) as a dict; anything else is one error naming the argument."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise EdgesmithError(f"{name} is a {type(value).__name__} ({value!r:.60}), not a dict.",
                             f"pass {name} as a dict, e.g. {name}={{'key': value}}.")
    return dict(value)


def _model(value, name: str = "model") -> str:
    """A model or target argument: a name or a path, as text; anything else is one error naming the argument."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise EdgesmithError(f"{name} is {value!r}, not a name or a path.",
                             f"pass {name} as a string, e.g. 'digits-mlp' or 'model.onnx'.")
    return value


def _out(value, name: str = "out") -> Path:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise EdgesmithError(f"{name} is {value!r}, not a path.", f"pass {name} as a file or folder path.")
    return Path(value)


def _path(value, name: str) -> str | None:
    """A data file argument: None, or a path (an array here is a mistake: the arrays go in ``calibration=``)."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise EdgesmithError(f"{name} is a {type(value).__name__}, not a path.",
                             f"pass {name} as the path of a .npy/.npz file or a folder (text for token-lm models).")
    return os.fspath(value)


def _whole(value, name: str, *, optional: bool = True, low: int = 0):
    """An integer argument (``None`` allowed where ``optional``), as the CLI's ``type=int`` would insist."""
    if value is None and optional:
        return None
    if not is_int(value, low):
        raise EdgesmithError(f"{name} is {value!r}, not a whole number of at least {low}.",
                             f"pass {name} as an int, e.g. {name}={max(low, 17) if name == 'opset' else max(low, 1)}.")
    return value


def _names(value, name: str) -> tuple[str, ...]:
    """One name or a list of names (``variants="fp32"`` means ("fp32",), not its letters)."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise EdgesmithError(f"{name} is {value!r}, not a name or a list of names.", f"pass e.g. {name}=['fp32'].")
    return tuple(value)


def deploy(model: str, target: str, *, out: str | os.PathLike | None = None, options: dict | None = None,
           model_options: dict | None = None, variants=(), batch_sizes=None, reps: int = 200, warmup: int = 20,
           latency_precision: float = 0.03,
           seed: int = 0, threads: int = 0, n_calibration: int | None = None, calibration_select: str = "first",
           tvm: bool | None = None, tvm_tune_trials: int = 0, runtimes=(), sensitivity: bool = False,
           force: bool = False, progress: bool = False, calibration_data=None, train_data=None, eval_data=None, labels=None, metric: str | None = None,
           input_shapes: dict | None = None, input_types: dict | None = None, train_fn=None,
           trust_model_file: bool = False, max_drop: float | str | None = None, min_sqnr: float | None = None,
           objective: str | None = None) -> Path:
    """Run ``target``'s plan for ``model`` and write the report folder (default ``runs/MODEL-TARGET``).

    ``model``: a producer name or a model file (model.onnx, file.py:factory, model.pt, model.pt2, a
    .pth checkpoint, a saved tree ensemble .npz); ``calibration_data`` / ``eval_data`` / ``labels``: paths of the
    user's data (.npy, .npz by input name, a folder; UTF-8 text for token-lm models); ``train_data``: inputs (and
    labels) that QAT variants fine-tune on; ``train_fn``: your own fine-tuning, ``train_fn(model)``, called by the QAT
    variants (``options={"qat_epochs": 1}`` offers them) on the calibrated brevitas model in place of their loop; ``metric``:
    accuracy, topK, binary, mse, mae, perplexity or fidelity (the default without labels); ``input_shapes`` and
    ``input_types``: ``{input name or "": per-sample shape}`` and ``{...: "int64"}`` to trace a model without data
    (``--input-shape ids=16:int64``; float32 where no type is given); ``runtimes``: more runtimes to time every
    variant in, e.g. ``("openvino",)`` (host-cpu); ``max_drop`` (``0.01``: one point of the metric, ``"1%"``: of the
    fp32 figure) or ``min_sqnr`` (dB), with ``objective`` (latency, energy, size or memory, read at the first of
    ``batch_sizes``): choose the artifact to ship and write ``decision.md`` and ``chosen/`` (``bench.decide``)."""
    from edgesmith.bench.pipeline.deploy import DeployOptions
    from edgesmith.bench.pipeline.deploy import deploy as _deploy
    from edgesmith.hardware import PlanOptions

    model, target = _model(model), _model(target, "target")
    out = _out(out) if out is not None else Path(f"runs/{model}-{target}")
    opts = DeployOptions(model=model, target=target, out=out, force=force, seed=seed,
                         threads=threads, batch_sizes=batch_sizes, warmup=warmup, reps=reps,
                         latency_precision=latency_precision,
                         n_calibration=n_calibration, calibration_select=calibration_select, sensitivity=sensitivity,
                         progress=progress, model_options=_table(model_options, "model_options"),
                         calibration_data=_path(calibration_data, "calibration_data"),
                         train_data=_path(train_data, "train_data"), eval_data=_path(eval_data, "eval_data"),
                         labels=_path(labels, "labels"), metric=metric,
                         input_shapes=_table(input_shapes, "input_shapes"), train_fn=train_fn,
                         trust_model_file=trust_model_file is True,
                         input_types=_input_types(input_types, input_shapes),
                         goal=_goal(max_drop, min_sqnr, objective, batch_sizes),
                         plan=PlanOptions(tvm=tvm, tvm_tune_trials=tvm_tune_trials, variants=_names(variants, "variants"),
                                          runtimes=_names(runtimes, "runtimes"), options=_table(options, "options")))
    return _deploy(opts)


def _goal(max_drop, min_sqnr, objective, batch_sizes):
    """The deploy's Goal, or None when no budget is given (an objective alone is refused: nothing to choose within)."""
    from edgesmith.bench.decide import Goal

    if max_drop is None and min_sqnr is None:
        if objective is not None:
            raise EdgesmithError(f"objective {objective!r} needs a budget to choose within.",
                                 "pass max_drop (0.01 or \"1%\") or min_sqnr (dB) too.")
        return None
    kw = {"min_sqnr": min_sqnr, "objective": objective or "latency"}
    if max_drop is not None:
        kw["max_drop"], kw["relative"] = Goal.parse_drop(max_drop) if isinstance(max_drop, str) else (max_drop, False)
    if batch_sizes:
        kw["batch"] = list(batch_sizes)[0]
    return Goal(**kw)


def _input_types(types, shapes) -> dict:
    """``input_types`` checked: a dict of known type names, each for an input that ``input_shapes`` names."""
    from edgesmith.bench.sources.base import INPUT_TYPES

    types, shapes = _table(types, "input_types"), _table(shapes, "input_shapes")
    for name, t in types.items():
        if t not in INPUT_TYPES:
            raise EdgesmithError(f"input_types[{name!r}] = {t!r} is not an input type edgesmith makes.",
                                 f"use one of {', '.join(INPUT_TYPES)}.")
        if name not in shapes:
            raise EdgesmithError(f"input_types names {name!r}, which input_shapes does not.",
                                 "give the input's shape in input_shapes too (a type alone makes no example input).")
    return types


def _traced(model: str, input_shapes, input_types) -> tuple[dict, dict]:
    """Shapes and types to trace ``model`` with, refused for an ONNX file, which ``export`` and ``quantize`` do not
    trace (``resolve_model`` refuses them for a producer)."""
    shapes, types = _table(input_shapes, "input_shapes"), _input_types(input_types, input_shapes)
    if shapes and str(model).endswith(".onnx"):
        raise EdgesmithError(f"--input-shape traces a model file without data; {model} is an ONNX file, whose graph "
                             "has its own shapes.", "drop --input-shape.")
    return shapes, types


def _check_examples(model: str, example_data) -> None:
    """``example_data`` is refused for a model that is not traced from torch (it would be read for nothing)."""
    from edgesmith.bench.sources.base import find_source
    from edgesmith.models import producer_names

    if example_data is None:
        return
    what = None
    if model in producer_names():
        what = "a producer, which has its own inputs"
    elif (src := find_source(model)) is not None and not src.traced:
        what = f"read by the {src.name} source, not traced"
    if what:
        raise EdgesmithError(f"--example-data traces a torch model (file.py:factory, .pt, .pt2); {model} is {what}.",
                             "drop --example-data.")


def _producer(model: str, seed: int, model_options: dict | None, request=None):
    """A built producer and its kind: a registered one by name, or with ``request`` (a ``UserRequest``) what the
    model source that reads ``model`` (a user's file) loads."""
    from edgesmith.bench.sources.base import resolve_model
    from edgesmith.models import get_producer
    from edgesmith.models.kinds import get_kind

    if request is None:
        producer = get_producer(model, seed=seed, **(model_options or {}))
    else:
        producer = resolve_model(model, request, seed=seed)
    kind = get_kind(producer.kind)
    kind.check_producer(producer)
    return producer.build(), kind


def _check_out(*paths: Path, force: bool) -> None:
    from edgesmith.common import check_output

    for p in paths:
        check_output(p, force=force, folder=False)


def export(model: str, out: str | os.PathLike, *, opset: int | None = None, seed: int = 0,
           model_options: dict | None = None, force: bool = False, dtype: str | None = None,
           options: dict | None = None, input_shapes: dict | None = None, input_types: dict | None = None,
           example_data: str | os.PathLike | None = None, trust_model_file: bool = False) -> Path:
    """Write ``model`` to ``out`` with the pass of the format its name says (``compress.formats``: each format written
    by a pass of its own names it, e.g. a C decoder's arrays or an official-layout checkpoint), else with its kind's
    export (ONNX: a graph, a step graph or a tree ensemble). ``options`` go
    to that pass's config, e.g. ``{"batch": 1, "vq_form": "int8"}`` for a token-lm decode graph or ``{"weights":
    "int4"}`` for the C decoder; ``opset`` and ``dtype`` (fp16, the default, bf16 or fp32 for a .pth) are two of them
    with flags of their own. A setting the chosen pass does not take is refused, naming those it does.
    ``input_shapes`` / ``input_types``: the example inputs that a torch model is traced with, as ``deploy`` takes them;
    ``example_data`` (.npy / .npz / a folder of them): real example inputs to trace it with instead."""
    from edgesmith.bench.pipeline.deploy import source_artifact
    from edgesmith.bench.sources.base import UserRequest, resolve_model
    from edgesmith.compress import PassContext, config_from_dict, run_passes
    from edgesmith.compress.base import INIT_SUFFIX
    from edgesmith.compress.formats import format_of_file
    from edgesmith.models.kinds import get_kind

    model, out, opset = _model(model), _out(out), _whole(opset, "opset", low=1)
    check_seed(seed)
    options, model_options = _table(options, "options"), _table(model_options, "model_options")
    shapes, types = _traced(model, input_shapes, input_types)
    fmt = format_of_file(out)
    named_pass = fmt.export_pass if fmt is not None else ""  # the format's own export pass, or "" for the kind's
    settings = {**(options or {}), **({"opset": opset} if opset else {}), **({"dtype": dtype} if dtype is not None else {})}
    if named_pass:  # known from the name alone: checked before any model is read
        _check_settings(named_pass, settings, out, dtype)
    _check_examples(model, example_data)
    _check_out(out, force=force)
    # a producer or a user's file (an official or quantized checkpoint, ...): the source that reads it
    request = UserRequest(options=dict(model_options or {}), input_shapes=shapes, input_types=types, seed=seed,
                          calibration_data=None if example_data is None else str(example_data),
                          trust_model_file=trust_model_file is True)
    source = resolve_model(model, request, seed=seed)
    kind = get_kind(source.kind)
    pass_kind = named_pass or kind.export_pass
    if not named_pass:
        _check_settings(pass_kind, settings, out, dtype)
        kind.check_producer(source)
    producer = source.build()
    config = config_from_dict({"kind": pass_kind, **settings})
    try:
        example = producer.example_inputs(1)
    except EdgesmithError:  # a user's model without data: a step graph needs none, a pass that does says so
        example = None
    with scratch_dir("export") as work:
        art = source_artifact(producer)
        if art.format == config.output_format == "onnx" and art.path is not None:
            # a user's torch model was exported to ONNX as it was read (checked against torch there): that file
            if options or opset:
                given = [f"--option {k}" for k in options or {}] + (["--opset"] if opset else [])
                raise EdgesmithError(f"{', '.join(given)} would be ignored: {model} was exported to ONNX as it was "
                                     "read, with the exporter's defaults.", "drop them.")
        else:
            art, _ = run_passes(art, [config], PassContext(workdir=Path(work), example_input=example, seed=seed))
        # a state-tuned model's starting state travels beside it: both arrive or neither
        sidecar = Path(str(art.path) + INIT_SUFFIX)
        with atomic_files([out, Path(str(out) + INIT_SUFFIX)], force=force) as (tmp, init):
            shutil.copyfile(art.path, tmp)
            if sidecar.exists():
                shutil.copyfile(sidecar, init)
    return out


def _check_settings(pass_kind: str, settings: dict, out: Path, dtype) -> None:
    """Every export setting must be an option of the pass that writes ``out``: one the pass would ignore is refused."""
    import dataclasses

    from edgesmith.compress.base import pass_config_type

    takes = {f.name for f in dataclasses.fields(pass_config_type(pass_kind))}
    unknown = [k for k in settings if k not in takes]
    if unknown:
        flags = [f"--dtype {dtype}" if k == "dtype" else "--opset" if k == "opset" else f"--option {k}" for k in unknown]
        raise EdgesmithError(f"{', '.join(flags)} would be ignored: {pass_kind}, the pass that writes {out.name}, takes "
                             f"{', '.join(sorted(takes)) or 'no options'}.",
                             "drop them, or name the output for a format whose pass takes them (see `edgesmith passes`).")


def is_model_file(model: str) -> bool:
    """Whether ``quantize`` reads ``model`` through the model source that ``deploy`` uses for it (an ONNX file, a .pth
    checkpoint, ``file.py:factory``, ...), data files and model options included: not a producer name."""
    from edgesmith.models import producer_names

    return str(model) not in producer_names()


@dataclasses.dataclass
class QuantizeResult:
    """What ``quantize`` wrote: the file, its report, and the metric of the written file (not for an ONNX file;
    for a model file given no data to score on, ``unscored`` says why instead)."""

    path: Path
    report_path: Path
    reports: list
    evaluation: object = None
    unscored: str | None = None


def quantize(model: str, pass_kind: str = "int8-qdq", *, out: str | os.PathLike, options: dict | None = None,
             calibration=None, n_calibration: int | None = None, seed: int = 0, model_options: dict | None = None,
             sensitivity: bool = False, force: bool = False, progress: bool = False,
             calibration_data: str | os.PathLike | None = None, eval_data: str | os.PathLike | None = None,
             input_shapes: dict | None = None, input_types: dict | None = None,
             trust_model_file: bool = False) -> QuantizeResult:
    """Apply one pass to a producer's model, a user's model file or an ONNX file and write the result plus
    ``OUT.report.json``.

    A producer or a model file (an ONNX file, an official checkpoint, ``file.py:factory``, ...: any model source
    ``deploy`` reads, with the same ``model_options``: an ONNX file's ``state=`` and ``const=`` too) is first exported with
    its kind's export pass when the pass takes a file, and a pass that leaves a torch model (pruning, a language-model
    quantizer) is followed by that export; the written file is then scored with the model's metric where there is data.
    ``calibration``: an array of inputs (for an ONNX file, fed to the pass as it is; for a producer it replaces the
    producer's own). ``calibration_data`` and ``eval_data``: a model file's data as files its source reads (UTF-8 text for
    a language model's checkpoint, .npy/.npz otherwise; a recurrent ONNX model calibrates on its step feeds), as ``deploy
    --calibration-data / --eval-data`` takes them. ``input_shapes`` / ``input_types``: example inputs to trace a torch
    model file given no data (``deploy --input-shape``).
    """
    from edgesmith.bench.pipeline.deploy import _artifact_scorer, predictor, source_artifact
    from edgesmith.compress import Artifact, PassContext, config_from_dict, run_passes
    from edgesmith.compress.base import INIT_SUFFIX, first_samples, pass_config_type, pass_kinds
    from edgesmith.runtimes import get_runtime, runtime_for

    model, out = _model(model), _out(out)
    check_seed(seed)
    options, model_options = _table(options, "options"), _table(model_options, "model_options")
    if not isinstance(pass_kind, str):
        raise EdgesmithError(f"pass_kind is {pass_kind!r}, not a pass name.", "pass e.g. 'int8-qdq' (see passes()).")
    shapes, types = _traced(model, input_shapes, input_types)
    report_path = out.with_suffix(out.suffix + ".report.json")
    _check_out(out, report_path, force=force)
    if n_calibration is not None and (isinstance(n_calibration, bool) or not isinstance(n_calibration, int)
                                      or n_calibration < 1):
        raise EdgesmithError(f"--n-calibration {n_calibration!r} is not a positive number of samples.",
                             "use e.g. --n-calibration 128.")
    config = config_from_dict({"kind": pass_kind, **(options or {})})
    calib = _checked_calibration(calibration)
    producer = None
    user_file = is_model_file(model)
    if eval_data is not None and not user_file:
        raise EdgesmithError(f"--eval-data scores the written file of a model file here; {model} is a producer, "
                             "scored on its own held-out data.",
                             f"score it on your data with `edgesmith deploy {model} --eval-data FILE`.")
    if calibration_data is not None and not user_file:
        raise EdgesmithError(f"calibration_data (a file) is read for a model file; {model} is a producer.",
                             "pass calibration= as an array to replace the producer's own.")
    if calibration is not None and calibration_data is not None:
        raise EdgesmithError("calibration was given twice (an array and a file).", "give one of them.")
    if str(model).endswith(".onnx") and calibration is not None:  # arrays given in Python, fed as they are
        from edgesmith.bench.sources.onnx_file import prepare

        prepared, _ = prepare(Path(model))  # opset >= 13, Constants folded, fully checked (as deploy does)
        art = onnx_artifact(prepared)
        passes, example, train = [config], None, None
        if calib is not None:
            calib = _calibration_for(prepared, calib)
            calib = first_samples(calib, n_calibration or 128)
    else:
        request = None
        if user_file or shapes:  # a producer given shapes is refused where it is resolved
            from edgesmith.bench.sources.base import UserRequest

            request = UserRequest(calibration_data=_path(calibration_data, "calibration_data"),
                                  eval_data=_path(eval_data, "eval_data"),
                                  input_shapes=shapes, input_types=types, options=dict(model_options or {}), seed=seed,
                                  trust_model_file=trust_model_file is True)
        producer, kind = _producer(model, seed, model_options, request)
        art = source_artifact(producer)
        calib = calib if calib is not None else producer.calibration_data(n_calibration or kind.default_n_calibration)
        try:
            example = producer.example_inputs(1)
        except NoEvaluationData:  # an ONNX file needs no example to export: a pass that needs data says so itself
            if not str(model).endswith(".onnx"):
                raise
            example = None
        train = producer.training_data()
        export_cfg = config_from_dict({"kind": kind.export_pass})
        passes = [export_cfg, config] if config.input_format != art.format and \
            export_cfg.output_format == config.input_format else [config]
        if passes[-1].output_format == "torch":  # e.g. pruning or a language-model quantizer: write it in the kind's format
            passes.append(export_cfg)
    if passes[0].input_format != art.format:  # before any work: e.g. a language-model quantizer given an ONNX classifier
        takes = [k for k in pass_kinds() if pass_config_type(k).input_format == art.format]
        raise EdgesmithError(f"pass {config.kind!r} takes a {config.input_format} model; {model} is read as "
                             f"{art.format} here.", f"use a pass that takes {art.format}: {', '.join(takes)}.")
    _check_suffix(out, passes[-1])
    with scratch_dir("quantize") as work:
        ctx = PassContext(workdir=Path(work), calibration=calib, example_input=example, seed=seed,
                          sensitivity=sensitivity, progress=progress, train_data=train)
        if sensitivity:  # the producer's metric, or for a bare file the fidelity to it on the calibration data
            ctx.evaluate = (_artifact_scorer(producer, os.cpu_count() or 1) if producer is not None
                            else _fidelity_scorer(art, ctx.calibration_checked()))
        result, reports = run_passes(art, passes, ctx)
        if result.path is None:
            raise EdgesmithError(f"pass {config.kind!r} leaves an in-memory {result.format} model, not a file.",
                                 "use `edgesmith deploy` for it, or a pass that writes a file.")
        # the file, its report (and a step graph's starting state) arrive together or not at all: a full
        # disk leaves no orphan model behind
        sidecar = Path(str(result.path) + INIT_SUFFIX)
        with atomic_files([out, Path(str(out) + INIT_SUFFIX), report_path], force=force) as (tmp, init, rtmp):
            shutil.copyfile(result.path, tmp)
            if sidecar.exists():
                shutil.copyfile(sidecar, init)
            rtmp.write_text(json.dumps({"input": str(model), "output": str(out), "format": result.format,
                                        "passes": [r.to_dict() for r in reports]}, indent=2, default=str) + "\n")
    evaluation = unscored = None
    if producer is not None:
        written = Artifact(result.format, path=out, meta=dict(result.meta))
        rt = get_runtime(runtime_for(written)).load(written)
        try:
            evaluation = producer.evaluate(predictor(rt, written))
            evaluation.extra["runtime"] = rt.name
        except NoEvaluationData as e:  # e.g. a language model's checkpoint given calibration text only
            unscored = f"{e.problem} ({e.fix})" if e.fix else e.problem
        except EdgesmithError as e:  # the file is whole; its score is what failed, and that is no success
            raise EdgesmithError(f"{out} was written, but scoring it failed: {e.problem}", e.fix) from None
    return QuantizeResult(out, report_path, reports, evaluation, unscored)


def _check_suffix(out: Path, last) -> None:
    from edgesmith.compress.formats import check_suffix

    check_suffix(out, last.output_format, last.kind)


def _checked_calibration(calibration):
    """Calibration given as one array or a dict of arrays by input name, each checked (real, finite, non-empty)."""
    from edgesmith.models.user_data import check_array

    if calibration is None:
        return None
    if isinstance(calibration, (str, os.PathLike)):
        raise EdgesmithError(f"calibration is a path ({os.fspath(calibration)!r}), not an array.",
                             "pass the array itself (numpy.load(path)); calibration_data= takes a path for a model "
                             "file other than ONNX.")
    if isinstance(calibration, dict):
        return {k: check_array(k, v, None, "calibration data") for k, v in calibration.items()}
    return check_array("", calibration, None, "calibration data")


def _calibration_for(path: Path, calib):
    """Calibration arrays checked against the ONNX file's declared inputs (dtype, rank, fixed dims), by name."""
    import onnx

    from edgesmith.compress.onnx_analysis import data_inputs
    from edgesmith.models.user_data import TensorSpec, check_array

    specs = [TensorSpec(n, d.name, tuple(dims[1:]), dims[0] if dims else None)
             for n, d, dims in data_inputs(onnx.load(str(path), load_external_data=False))]
    if not isinstance(calib, dict):
        if len(specs) != 1:
            raise EdgesmithError(f"the model takes {len(specs)} inputs ({', '.join(s.name for s in specs)}) but the "
                                 "calibration data is one array.", "save an .npz with one array per input name.")
        return check_array(specs[0].name, calib, specs[0], "calibration data")
    missing = [s.name for s in specs if s.name not in calib]
    if missing:
        raise EdgesmithError(f"the calibration data has no array for input(s) {', '.join(missing)}.",
                             "name the .npz arrays after the model's inputs.")
    return {s.name: check_array(s.name, calib[s.name], s, "calibration data") for s in specs}


def _fidelity_scorer(reference, x):
    """Scores an ONNX artifact by its output SQNR (dB) against ``reference`` on inputs ``x`` (the metric
    the per-layer sensitivity table uses when a file comes without evaluation data)."""
    import onnx

    from edgesmith.compress.onnx_analysis import batched_feeds
    from edgesmith.models.metrics import fidelity
    from edgesmith.runtimes import get_runtime

    feeds = batched_feeds(onnx.load(str(reference.path), load_external_data=False), x)

    def outputs(art):
        rt = get_runtime("onnxruntime").load(art)
        return np.concatenate([rt.run(f).outputs for f in feeds])

    ref = outputs(reference)
    return lambda art: fidelity(outputs(art), ref)[0]


def onnx_artifact(path: Path):
    """A user's ONNX file as an artifact, after onnx's own checker (a bad file is one clear error)."""
    import onnx

    from edgesmith.compress import Artifact

    from edgesmith.bench.sources.onnx_file import load_checked

    model, _ = load_checked(path)  # a missing file, a broken one, missing external data: each its own message
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # ValidationError and friends: a file that loads but is not valid ONNX
        raise EdgesmithError(f"{path} is not a valid ONNX model ({type(e).__name__}).",
                             "re-export it, or check that the file was copied completely.") from None
    dims = model.graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value if d.dim_value > 0 else None for d in dims[1:]]
    return Artifact("onnx", path=path, meta={"input_shape": shape if None not in shape else None,
                                             "input_name": model.graph.input[0].name})


def denoise(inp: str | os.PathLike, out: str | os.PathLike, *, variant: str = "dense", runtime: str | None = None,
            downmix: bool = False, normalize: bool = False, model: str | None = None, force: bool = False, seed: int = 0,
            model_options: dict | None = None, progress: bool = False) -> list[dict]:
    """Enhance a WAV file or a folder of them (``bench/apps/denoise.py``); returns one record per file written.
    The speech keeps the level it had in the input (``normalize``: the peak is raised to just under full scale)."""
    from edgesmith.bench.apps.denoise import denoise as _denoise

    inp, out = _out(inp, "inp"), _out(out)
    return _denoise(inp, out, model=model, variant=variant, runtime=runtime, downmix=downmix, normalize=normalize, force=force,
                    seed=check_seed(seed), model_options=_table(model_options, "model_options"), progress=progress)


def sweep(recipe: str | os.PathLike, *, out: str | os.PathLike | None = None, workers: int | None = None,
          ray: str | None = None, force: bool = False, progress: bool = False, yes: bool = False) -> dict:
    """Run (or resume) a sweep recipe's cells (``bench/sweep.py``); returns the merged report. ``yes`` runs a grid of
    more than 1,000 cells."""
    from edgesmith.bench.sweep import run_sweep

    recipe, out = _out(recipe, "recipe"), None if out is None else _out(out)
    return run_sweep(recipe, out, workers=_whole(workers, "workers"), ray=ray, force=force, progress=progress,
                     log=print if progress else (lambda msg: None), yes=yes)


def targets() -> list[dict]:
    """Every target: formats, the model kinds it runs, its cost model with each coefficient's source."""
    from edgesmith.hardware import get_target, target_names

    return [get_target(n).describe() for n in target_names()]


def producers() -> list[dict]:
    """Every registered model producer: name, kind, description, per-sample input shape, metric."""
    from edgesmith.models import get_producer, producer_names

    out = []
    for n in producer_names():
        p = get_producer(n)
        out.append({"name": n, "kind": p.kind, "description": p.description, "input_shape": list(p.input_shape),
                    "metric": p.metric.name})
    return out


def passes() -> list[dict]:
    """Every compression/export pass with its formats and default options."""
    from edgesmith.compress.base import pass_config_type, pass_kinds

    return [{"kind": k, "input_format": pass_config_type(k).input_format,
             "output_format": pass_config_type(k).output_format, "options": pass_config_type(k)().to_dict()}
            for k in pass_kinds()]


def kinds() -> list[dict]:
    """Every model kind with its options (defaults and help)."""
    from edgesmith.models.kinds import get_kind, kind_names

    return [get_kind(n).describe() for n in kind_names()]
