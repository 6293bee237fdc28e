"""Recipes (TOML) and ``KEY=VALUE`` options: one schema, checked before any work starts.

A deploy recipe::

    model = "digits-mlp"          # a producer name, or a model file (model.onnx, net.py:make, ...)
    target = "host-cpu"
    calibration_data = "calib.npz"   # the user's data and metric (optional): eval_data, labels, metric,
                                     # input_shape = ["3,64,64"]
    seed = 0
    [plan]                        # tvm, tvm_tune_trials, tvm_records, variants, runtimes (e.g. ["openvino"])
    variants = ["fp32", "int8"]
    [bench]                       # batch_sizes, warmup, reps, n_calibration, calibration_select
    reps = 200
    [options]                     # the model kind's options (`edgesmith kinds`)
    calibration = "percentile"
    [model_options]               # the producer's arguments
    tiny = true

A demo or study recipe lists several deploys as ``[[deploy]]`` tables; each takes the same keys and
inherits the top level's. Every value is checked for its type here, so ``reps = "many"`` or
``plan = 3`` is one clear error before anything is built. A relative input path (a model file, the data files)
is read from the recipe's folder, so a recipe runs the same from any folder; ``out`` stays relative to the folder
edgesmith runs in.
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

from edgesmith.common import EdgesmithError, regular_file

TOP = {"model": str, "target": str, "out": str, "seed": int, "threads": int, "force": bool, "sensitivity": bool,
       "trust_model_file": bool,
       "calibration_data": str, "train_data": str, "eval_data": str, "labels": str, "metric": str, "input_shape": list}
PLAN = {"tvm": bool, "tvm_tune_trials": int, "tvm_records": bool, "variants": list, "runtimes": list}
BENCH = {"batch_sizes": list, "warmup": int, "reps": int, "latency_precision": (int, float), "n_calibration": int,
         "calibration_select": str}
GOAL = {"max_drop": (int, float, str), "min_sqnr": (int, float), "objective": str, "batch": int,
        "validation_fraction": (int, float), "restore": bool, "allow_qat": bool, "qat_epochs": int}
TABLES = {"plan": PLAN, "bench": BENCH, "goal": GOAL, "options": None, "model_options": None}
_TYPE_NAMES = {str: "a string", int: "a whole number", bool: "true or false", list: "a list", (int, float): "a number",
               (int, float, str): 'a number or a percentage ("1%")'}


def _check_value(where: str, key: str, value, expected) -> None:
    ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
    if not ok:
        raise EdgesmithError(f"{where}: {key} is {value!r}, not {_TYPE_NAMES[expected]}.",
                             f"write {key} as {_TYPE_NAMES[expected]} (see the recipe example in the README).")
    if key == "batch_sizes" and not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in value):
        raise EdgesmithError(f"{where}: batch_sizes {value!r} are not all positive whole numbers.",
                             "write e.g. batch_sizes = [1, 64].")
    if key == "variants" and not all(isinstance(v, str) for v in value):
        raise EdgesmithError(f"{where}: variants {value!r} are not all names.", 'write e.g. variants = ["fp32"].')
    if key == "runtimes" and not all(isinstance(v, str) for v in value):
        raise EdgesmithError(f"{where}: runtimes {value!r} are not all names.", 'write e.g. runtimes = ["openvino"].')


def check_deploy_table(data: dict, where: str) -> dict:
    """Check one deploy's keys and value types; returns it unchanged."""
    for key, value in data.items():
        if key in TOP:
            _check_value(where, key, value, TOP[key])
        elif key in TABLES:
            if not isinstance(value, dict):
                raise EdgesmithError(f"{where}: {key} is {value!r}, not a table.",
                                     f"write it as a [{key}] section of KEY = VALUE lines.")
            schema = TABLES[key]
            if schema is None:
                continue  # kind and producer options: checked by their own dataclasses
            unknown = sorted(set(value) - set(schema))
            if unknown:
                raise EdgesmithError(f"{where}: unknown [{key}] key(s) {', '.join(unknown)}.",
                                     f"valid keys: {', '.join(sorted(schema))}.")
            for k, v in value.items():
                _check_value(f"{where} [{key}]", k, v, schema[k])
        elif key != "deploy":
            raise EdgesmithError(f"{where}: unknown key {key!r}.",
                                 f"valid top-level keys: {', '.join(sorted(TOP))}, [plan], [bench], [options], "
                                 "[model_options], [[deploy]].")
    return data


def read_toml(p: Path, what: str = "recipe") -> dict:
    """A TOML file as a dict; a missing file or bad syntax is one clear error naming ``what`` it is."""
    if p.is_dir():
        raise EdgesmithError(f"{what} {p} is a folder, not a TOML file.", f"give the path of the {what} file itself.")
    if not p.is_file():
        if p.exists():
            regular_file(p, what)  # a FIFO or a device: said as such
        raise EdgesmithError(f"{what} {p} does not exist.", f"check the path of the {what}.")
    try:
        return tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise EdgesmithError(f"{what} {p} is not valid TOML: {e}.", "fix the syntax (see README for an example).") from None


def load_recipe(path: str | None) -> dict:
    """The recipe at ``path`` (empty without one), schema-checked, ``[[deploy]]`` tables included, its relative
    input paths read from its folder (``anchored``)."""
    if not path:
        return {}
    p = Path(path)
    data = read_toml(p)
    check_deploy_table(data, f"recipe {p}")
    deploys = data.get("deploy", [])
    if not isinstance(deploys, list) or not all(isinstance(d, dict) for d in deploys):
        raise EdgesmithError(f"recipe {p}: deploy must be a list of [[deploy]] tables.", "write each as [[deploy]].")
    for i, d in enumerate(deploys):
        if "deploy" in d:
            raise EdgesmithError(f"recipe {p}: [[deploy]] {i + 1} holds another deploy list.", "keep the list flat.")
        check_deploy_table(d, f"recipe {p} [[deploy]] {i + 1}")
    data = anchored(data, p.parent)
    if deploys:
        data["deploy"] = [anchored(d, p.parent) for d in deploys]
    return data


INPUT_PATHS = ("calibration_data", "train_data", "eval_data", "labels")


def anchored(table: dict, folder: Path, resolve: bool = False) -> dict:
    """A copy of a (checked) deploy table whose relative input paths, the model file (``net.py`` of
    ``net.py:make`` too) and ``INPUT_PATHS``, are joined to ``folder``, the recipe's; a producer name is left as
    it is. ``resolve`` also makes the paths that exist absolute (a sweep's worker may start in another folder)."""
    from edgesmith.bench.sources.torch_factory import split_factory
    from edgesmith.models import producer_names

    def place(path: str) -> str:
        joined = path if Path(path).is_absolute() else str(folder / path)
        return str(Path(joined).resolve()) if resolve and Path(joined).exists() else joined

    out = dict(table)
    model = out.get("model")
    if model and model not in producer_names():
        stem, factory = split_factory(model)
        out["model"] = place(stem) + factory
    for key in INPUT_PATHS:
        if out.get(key):
            out[key] = place(out[key])
    return out


def merged(base: dict, over: dict) -> dict:
    """``over``'s keys on top of ``base``'s, tables merged key by key (a [[deploy]] entry over the top level)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items() if k != "deploy"}
    for k, v in over.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out


def parse_key_values(items: list[str] | None, flag: str) -> dict:
    """``KEY=VALUE`` strings -> a dict; VALUE is read as JSON (true, 3, 0.5, [1,2], "x") or else kept as text."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise EdgesmithError(f"{flag} {item!r} is not KEY=VALUE.", f"write it like {flag} name=value.")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def deploy_options(args, recipe: dict, overrides: dict | None = None):
    """DeployOptions from a (checked) recipe table and CLI flags; flags win, ``overrides`` win over both."""
    from edgesmith.bench.pipeline.deploy import DeployOptions
    from edgesmith.bench.sources.base import parse_input_shapes
    from edgesmith.hardware import PlanOptions

    recipe_deploys = recipe.get("deploy") or []
    recipe = merged(recipe, overrides or {})
    plan_kw = dict(recipe.get("plan", {}))
    bench_kw = dict(recipe.get("bench", {}))
    if getattr(args, "tvm_tune_trials", None) is not None:
        plan_kw["tvm_tune_trials"] = args.tvm_tune_trials
    if getattr(args, "tvm", False) and getattr(args, "no_tvm", False):
        raise EdgesmithError("--tvm and --no-tvm were both given.", "give one of them.")
    if getattr(args, "tvm", False):
        plan_kw["tvm"] = True
    if getattr(args, "no_tvm", False):
        plan_kw["tvm"] = False
    if getattr(args, "tvm_records", False):
        plan_kw["tvm_records"] = True
    if getattr(args, "variant", None):
        plan_kw["variants"] = tuple(args.variant)
    if getattr(args, "runtime", None):
        plan_kw["runtimes"] = tuple(args.runtime)
    if "runtimes" in plan_kw:
        plan_kw["runtimes"] = tuple(plan_kw["runtimes"])
    plan_kw["options"] = {**recipe.get("options", {}), **parse_key_values(getattr(args, "option", None), "--option")}
    if getattr(args, "batch", None):
        bench_kw["batch_sizes"] = tuple(args.batch)
    for name in ("warmup", "reps", "latency_precision", "n_calibration", "calibration_select"):
        v = getattr(args, name, None)
        if v is not None:
            bench_kw[name] = v
    if "batch_sizes" in bench_kw:
        bench_kw["batch_sizes"] = tuple(bench_kw["batch_sizes"])
    top = {k: recipe[k] for k in ("seed", "threads", "force", "sensitivity", "trust_model_file") if k in recipe}
    for name in ("seed", "threads"):
        v = getattr(args, name, None)
        if v is not None:
            top[name] = v
    if getattr(args, "force", False):
        top["force"] = True
    if getattr(args, "sensitivity", False):
        top["sensitivity"] = True
    if getattr(args, "trust_model_file", False):
        top["trust_model_file"] = True
    model = getattr(args, "model", None) or recipe.get("model")
    target = getattr(args, "target", None) or recipe.get("target")
    if not model and recipe_deploys:
        raise EdgesmithError(f"the recipe lists {len(recipe_deploys)} [[deploy]] table(s), which `deploy` does not run.",
                             "run them with `edgesmith demo --recipe FILE`, or set model at the recipe's top level.")
    if not model:
        raise EdgesmithError("no model given.", "pass MODEL or set model in the recipe.")
    if not target:
        raise EdgesmithError("no target given.", "pass --target or set target in the recipe.")
    out = getattr(args, "out", None) or recipe.get("out") or f"runs/{model}-{target}"
    model_options = {**recipe.get("model_options", {}),
                     **parse_key_values(getattr(args, "model_option", None), "--model-option")}
    data = {k: recipe[k] for k in ("calibration_data", "train_data", "eval_data", "labels", "metric") if k in recipe}
    for k in ("calibration_data", "train_data", "eval_data", "labels", "metric"):
        if getattr(args, k, None) is not None:
            data[k] = getattr(args, k)
    shapes, types = parse_input_shapes(getattr(args, "input_shape", None) or recipe.get("input_shape"))
    return DeployOptions(model=model, target=target, out=Path(out), plan=PlanOptions(**plan_kw),
                         progress=not getattr(args, "quiet", False), model_options=model_options,
                         input_shapes=shapes, input_types=types, goal=goal_options(args, recipe.get("goal")),
                         **data, **bench_kw, **top)


def goal_options(args, table: dict | None):
    """The Goal of a deploy from ``--max-drop``/``--min-sqnr``/``--objective`` (the first ``--batch`` is the batch the
    objective is read at) over a recipe's ``[goal]`` table; None when neither asks for a choice."""
    from edgesmith.bench.decide import Goal

    kw = dict(table or {})
    if getattr(args, "max_drop", None) is not None:
        kw["max_drop"] = args.max_drop
        kw.pop("min_sqnr", None)
    if getattr(args, "min_sqnr", None) is not None:
        kw["min_sqnr"] = args.min_sqnr
        if getattr(args, "max_drop", None) is None:
            kw.pop("max_drop", None)
    if getattr(args, "objective", None) is not None:
        kw["objective"] = args.objective
    if getattr(args, "allow_qat", False):
        kw["allow_qat"] = True
    if not kw:
        return None
    if getattr(args, "batch", None):
        kw.setdefault("batch", args.batch[0])
    if isinstance(kw.get("max_drop"), str):
        kw["max_drop"], kw["relative"] = Goal.parse_drop(kw["max_drop"])
    if "max_drop" not in kw and "min_sqnr" not in kw:
        asked = f"--objective {kw['objective']}" if "objective" in kw else "--allow-qat"
        raise EdgesmithError(f"{asked} needs a budget to choose within.",
                             "add --max-drop 1% (or 0.01 in the metric's units) or --min-sqnr 30.")
    return Goal(**kw)
