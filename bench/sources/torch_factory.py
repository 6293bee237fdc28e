"""A torch model from a Python file: ``path/to/file.py:factory`` (a function returning an ``nn.Module``).

The module is exported to ONNX here (the legacy exporter, then the dynamo one if that fails), with a
dynamic batch dimension, its inputs named after the user's data arrays (or ``input``), and then deployed
like any ONNX file. Example inputs for the export come from ``--calibration-data`` / ``--eval-data`` or
``--input-shape``. An export failure names the operator the exporter could not handle. The export's
largest difference from the torch module on the example inputs is in the report's notes.

``export_to_onnx`` is shared with the TorchScript and ``torch.export`` sources.
"""
from __future__ import annotations

import hashlib
import importlib.util
import math
import re
import sys
import warnings
from pathlib import Path

import numpy as np

from edgesmith.bench.sources.base import (ModelSource, UserRequest, file_digest, register_source, sample_inputs,
                                          work_path)
from edgesmith.common import EdgesmithError, atomic_path, quiet_native_output, raised

OP_PATTERNS = (r"operator '?([\w:.]+)'? to ONNX", r"Unsupported: ONNX export of operator ([\w:.]+)",
               r"'(aten::\w+(?:\.\w+)?)'", r"(aten::\w+(?:\.\w+)?)", r"(aten\.\w+(?:\.\w+)?)")


def failing_op(message: str) -> str | None:
    for pattern in OP_PATTERNS:
        m = re.search(pattern, message)
        if m:
            return m.group(1)
    return None


def data_specs(request: UserRequest):
    """Input specs read off the user's data (names, dtypes, per-sample shapes; batch dynamic) or the
    ``--input-shape`` entries (float32 unless an entry names its type, ``ids=16:int64``)."""
    from edgesmith.models.user_data import LABEL_KEYS, TensorSpec, read_arrays

    for path in (request.calibration_data, request.eval_data):
        if path is not None:
            arrays = {k: v for k, v in read_arrays(path).items() if k not in LABEL_KEYS}
            return [TensorSpec(k or "input", np.asarray(v).dtype.name if np.asarray(v).dtype.kind != "f" else "float32",
                               tuple(np.asarray(v).shape[1:])) for k, v in arrays.items()]
    if request.input_shapes:
        return [TensorSpec(k or "input", request.input_types.get(k, "float32"), tuple(v))
                for k, v in request.input_shapes.items()]
    raise EdgesmithError("a torch model needs example inputs to be exported to ONNX.",
                         "pass --input-shape with each input's per-sample shape (3,64,64; ids=16:int64 for token ids), "
                         "or --calibration-data / --eval-data (.npz named by input).")


def _in_forward_order(module, specs: list, label: str) -> list:
    """``specs`` in the order ``forward`` takes them when their names are its first parameters (an .npz keeps the
    order its arrays were saved in); more arrays than ``forward`` takes is an error naming both."""
    import inspect

    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):  # a scripted or C++ module
        return specs
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return specs
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [s.name for s in specs]
    if len(names) > len(positional):
        raise EdgesmithError(f"the data holds {len(names)} input arrays ({', '.join(names)}) but the forward of "
                             f"{label} takes {len(positional)} ({', '.join(positional)}).",
                             "keep only the model's inputs in the .npz (labels as 'labels' or 'targets').")
    if set(names) == set(positional[:len(names)]):
        by_name = {s.name: s for s in specs}
        return [by_name[n] for n in positional[:len(names)]]
    return specs


class _Outputs:
    """Wraps a module so that it returns a tuple of tensors (HF ``ModelOutput``, dicts and lists included)."""

    @staticmethod
    def wrap(module):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, *args):
                out = self.m(*args)
                if hasattr(out, "to_tuple"):
                    out = out.to_tuple()
                elif isinstance(out, dict):
                    out = tuple(out.values())
                if isinstance(out, (list, tuple)):
                    out = tuple(o for o in out if isinstance(o, torch.Tensor))
                return out

        return Wrapped(module).eval()


def export_to_onnx(module, label: str, key: bytes, request: UserRequest, program=None) -> tuple[Path, list[str]]:
    """ONNX export of a torch module (or an ExportedProgram ``program``) into the source cache; returns the
    path and notes (which exporter, the export's error against torch on the example inputs)."""
    import torch

    if program is not None:
        given = request.calibration_data or request.eval_data or request.input_shapes  # --labels/--metric hold no inputs
        specs = data_specs(request) if given else program_specs(program, label)
    else:
        specs = _in_forward_order(module, data_specs(request), label)
    example = sample_inputs(specs, request, n=_program_batch(program) or 2, seed=request.seed)
    names = [s.name for s in specs]
    args = tuple(torch.from_numpy(np.ascontiguousarray(example[n])) for n in names)
    out = work_path(key + repr(specs).encode() + b"onnx-export-v2", ".onnx")
    notes = []
    if program is None and not isinstance(module, torch.jit.ScriptModule):  # a scripted one is exported as it is
        module = _Outputs.wrap(module.eval())
    shapes = ", ".join(f"{n} {tuple(a.shape)} {str(a.dtype).replace('torch.', '')}" for n, a in zip(names, args))
    try:  # the user's forward on inputs of the shapes the user gave (or the model declares)
        with torch.no_grad():
            ref = module(*args) if program is None else program.module()(*args)
    except (Exception, SystemExit) as e:  # a model raises anything; its message says what did not fit
        raise EdgesmithError(f"{label} fails on example inputs ({shapes}): {raised(e, 300)}",
                             "give inputs of the shape, type and range its forward takes: --input-shape [NAME=]D,D,... "
                             "(without the batch; float32 unless a type follows, e.g. ids=16:int64), or data files like them "
                             "(--calibration-data / --eval-data; --example-data for export).") from None
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    out_names = ["output"] if len(ref) == 1 else [f"output_{i}" for i in range(len(ref))]
    want = [r.detach().numpy() for r in ref]
    bad = [n for n, w in zip(out_names, want) if np.issubdtype(w.dtype, np.floating) and np.isnan(w).any()]
    if bad:  # a reference of NaN would score every variant "nan" and pass as a deploy (an infinity can be meant)
        raise EdgesmithError(f"{label} returns NaN values ({', '.join(bad)}) on example inputs ({shapes}).",
                             "check its weights for NaN (a diverged training run) and give inputs in the range it "
                             "expects (--calibration-data / --eval-data).")
    batch_dynamic = len(args[0]) > 1 and _program_batch(program) is None and all(w.shape[:1] == (len(args[0]),)
                                                                                  for w in want)
    via_file = out.with_name(out.name + ".via")  # which exporter wrote a cached file, and why not the first
    if out.exists():
        try:
            checked = _check_export(out, example, want, label, batch_dynamic)
            notes.append(_export_note(*checked, via_file.read_text() if via_file.exists() else ""))
            return out, notes
        except _Unfaithful:  # cached by a version that kept files it could not check: exported again
            out.unlink(missing_ok=True)
    errors, refusals = [], []
    for dynamo in ((True,) if program is not None else (False, True)):
        exporter = "dynamo" if dynamo else "legacy"
        try:
            with warnings.catch_warnings(), atomic_path(out, force=True) as tmp:
                warnings.simplefilter("ignore")
                _export(program if program is not None else module, args, tmp, names, out_names, dynamo)
                # a file that does not run, or computes something else, is not kept: the other exporter may do better
                checked = _check_export(tmp, example, want, label, batch_dynamic)
                via = (f" by the dynamo exporter (the {refusals[0][0]} exporter's file: "
                       f"{refusals[0][1].problem.rstrip('.')})" if refusals else "")
                via_file.write_text(via)
            notes.append(_export_note(*checked, via))
            return out, notes
        except _Unfaithful as e:
            refusals.append((exporter, e.error))
        except EdgesmithError:
            raise
        except Exception as e:  # the exporters raise many types
            errors.append(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip())  # no terminal colour codes
    if refusals:  # an exporter wrote a file: its check says more than the other's exception
        exporter, first = refusals[0]
        others = [f"the {x} exporter's file " + err.problem.replace(f"the ONNX export of {label} ", "", 1).rstrip(".")
                  for x, err in refusals[1:]]
        others += [f"the other exporter failed: {e.splitlines()[0][:200]}" for e in errors if e]
        raise EdgesmithError(f"{first.problem.rstrip('.')} (the {exporter} exporter's file)"
                             + "".join(f"; {o}" for o in others) + ".", first.fix)
    msg = " | ".join(e.splitlines()[0][:200] for e in errors if e)
    op = next((failing_op(e) for e in errors if failing_op(e)), None)
    raise EdgesmithError(f"exporting {label} to ONNX failed" + (f" at operator {op}" if op else "") + f": {msg}",
                         "replace that operator in the model (or export the model to ONNX yourself and deploy "
                         "the .onnx file).")


class _Unfaithful(Exception):
    """An exported file that onnxruntime cannot load or run, or that computes something other than torch."""

    def __init__(self, error: EdgesmithError):
        super().__init__(error.problem)
        self.error = error


def _export_note(diff: float, checked: str, via: str = "") -> str:
    return f"exported from torch to ONNX here{via}; largest output difference from the torch module on {checked}: {diff:.3g}"


def _check_export(path: Path, example: dict, want: list, label: str, batch_dynamic: bool) -> tuple[float, str]:
    """The exported file's largest difference from torch's outputs ``want`` on ``example`` (and, for a file with a
    dynamic batch, on the first sample alone), with what it was checked on; ``_Unfaithful`` when onnxruntime cannot
    load or run it or it is off by more than ``EXPORT_TOLERANCE``."""
    import onnxruntime as ort

    def first_line(e: Exception) -> str:
        return (str(e).strip().splitlines() or [""])[0][:200]

    fix = ("export the model to ONNX yourself, check it against torch, and deploy the .onnx file (a forward that draws "
           "random numbers in eval mode cannot be exported faithfully).")
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # its failure is reported below, once, not also logged in colour
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feeds = {i.name: example[i.name] for i in sess.get_inputs() if i.name in example}
        got = sess.run(None, feeds)
    except Exception as e:  # onnxruntime raises its own types: an op or shape it cannot take
        raise _Unfaithful(EdgesmithError(f"the ONNX export of {label} does not run in onnxruntime: {first_line(e)}",
                                         fix)) from None
    n = len(next(iter(feeds.values()))) if feeds else 0
    diff = max(_max_diff(g, w) for g, w in zip(got, want))
    checked = f"{n} example inputs"
    if batch_dynamic:  # a batch-dynamic file is timed at other batches: one traced at 2 must give the same rows at 1
        try:
            one = sess.run(None, {k: v[:1] for k, v in feeds.items()})
        except Exception as e:  # a shape the trace fixed at the example batch
            raise _Unfaithful(EdgesmithError(f"the ONNX export of {label} runs only at the batch it was traced with ({n}); "
                                             f"at batch 1 onnxruntime says: {first_line(e)}",
                                             "size reshapes from the input (x.view(x.shape[0], -1)), not as constants.")
                              ) from None
        diff = max(diff, *(_max_diff(g, w[:1]) for g, w in zip(one, want)))
        checked += " (as one batch, and the first alone)"
    finite = [np.abs(w.astype(np.float64)) for w in want]
    scale = max([1.0] + [float(np.nanmax(a)) for a in finite if a.size and not np.isnan(a).all()])
    if not diff <= EXPORT_TOLERANCE * scale:
        raise _Unfaithful(EdgesmithError(f"the ONNX export of {label} does not compute what the torch module computes: "
                                         f"largest output difference {diff:.3g} on {checked}, with outputs up to "
                                         f"{scale:.3g}.", fix))
    return diff, checked


EXPORT_TOLERANCE = 1e-3  # an exported graph off by more than this times the largest output (at least 1) is refused


def _max_diff(got, want) -> float:
    """Largest |got - want|; NaN where both are NaN counts as equal, anywhere else (or a shape mismatch) as infinite."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if g.shape != w.shape or (np.isnan(g) != np.isnan(w)).any():
        return math.inf
    d = np.abs(np.where(np.isnan(g), 0.0, g - w))
    return float(d.max()) if d.size else 0.0


def program_specs(program, label: str) -> list:
    """A ``torch.export`` program's inputs as it was exported (names, types, per-sample shapes): enough to export
    it without data when every dimension after the batch is fixed."""
    import torch

    from edgesmith.models.user_data import TensorSpec

    specs = []
    for node in _user_inputs(program):
        val = node.meta.get("val")
        dims = tuple(getattr(val, "shape", ())[1:])
        dtype = str(getattr(val, "dtype", "float32")).replace("torch.", "")
        if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in dims):
            typed = "" if dtype == "float32" else f":{dtype}"
            raise EdgesmithError(f"{label}: input {node.name!r} has dynamic dimensions after the batch, so its example "
                                 "inputs cannot be made from the program alone.",
                                 f"pass --input-shape {node.name}=D,...{typed} or --calibration-data / --eval-data.")
        specs.append(TensorSpec(node.name, dtype, dims))
    return specs


def _user_inputs(program) -> list:
    """The placeholder nodes of a ``torch.export`` program's own inputs (not its parameters or buffers), in order."""
    user = set(program.graph_signature.user_inputs)
    return [n for n in program.graph.nodes if n.op == "placeholder" and n.name in user]


def _program_batch(program) -> int | None:
    """The fixed batch of an exported program's first input (None when dynamic or unknown)."""
    if program is None:
        return None
    try:
        d = _user_inputs(program)[0].meta["val"].shape[0]
        return int(d) if isinstance(d, int) else None
    except Exception:  # symbolic or missing metadata: no fixed batch to honour
        return None


def _export(model, args, path, names, out_names, dynamo: bool) -> None:
    import inspect
    import logging

    import torch

    # not "torchvision is not installed" at every export, nor the dynamo exporter's optimizer passes line by line
    for name in ("torch.onnx", "onnxscript", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if dynamo:
        batch = torch.export.Dim("batch", min=1)
        shapes = None
        if not isinstance(model, torch.export.ExportedProgram):  # dynamic_shapes follows forward's signature:
            shapes = tuple({0: batch} for _ in args)           # one entry per parameter, a tuple for *args
            if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in inspect.signature(model.forward).parameters.values()):
                shapes = (shapes,)
        torch.onnx.export(model, args, str(path), input_names=names, output_names=out_names, dynamo=True,
                          dynamic_shapes=shapes, opset_version=18, verbose=False, external_data=False)
        _drop_node_metadata(path)
    else:
        dyn = {n: {0: "batch"} for n in (*names, *out_names)}
        with quiet_native_output():  # a failed export's graph dump; its error is reported, and dynamo tried next
            torch.onnx.export(model, args, str(path), input_names=names, output_names=out_names, dynamic_axes=dyn,
                              opset_version=17, dynamo=False)


def _drop_node_metadata(path) -> None:
    """Remove the per-node metadata the dynamo exporter writes (each node's torch stack trace, module path and FX
    node): debugging aid for torch, 40% of a small transformer's file, and nothing a runtime reads."""
    import onnx

    from edgesmith.compress.onnx_analysis import graphs_with_scope

    model = onnx.load(str(path))
    for graph, _, _ in graphs_with_scope(model):
        for node in graph.node:
            del node.metadata_props[:]
    onnx.save(model, str(path))


FACTORY_SPEC = re.compile(r"(.+\.py)(:[A-Za-z_]\w*)")


def split_factory(spec: str) -> tuple[str, str]:
    """``("net.py", ":make")`` for ``net.py:make``; ``(spec, "")`` for any other model (a file or a name)."""
    m = FACTORY_SPEC.fullmatch(spec)
    return (m.group(1), m.group(2)) if m else (spec, "")


def load_factory(spec: str, seed: int = 0):
    """The module ``factory()`` of ``file.py:factory`` returns, imported from the file (not installed). torch's
    generator is seeded with ``seed`` around the import and the call (and restored after), so a factory that
    initialises weights at random gives the same module, and the same artifacts, every run."""
    import torch

    file, _, name = spec.rpartition(":")
    path = Path(file)
    if not path.is_file():
        raise EdgesmithError(f"{path} does not exist.", "give path/to/file.py:factory.")
    mod_name = "edgesmith_user_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    loader = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[mod_name] = module
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            loader.loader.exec_module(module)
        except (Exception, SystemExit) as e:  # the user's code may also call sys.exit: still one line, exit 2
            raise EdgesmithError(f"importing {path} failed: {raised(e)}",
                                 "fix the file so that `python file.py` runs.") from None
        factory = getattr(module, name, None)
        if not callable(factory):
            raise EdgesmithError(f"{path} has no function {name!r}.", f"define def {name}(): return my_module().")
        try:
            net = factory()
        except (Exception, SystemExit) as e:
            raise EdgesmithError(f"{spec}() failed: {raised(e)}",
                                 "make the factory return an nn.Module without arguments.") from None
    return as_module(net, f"{spec}() returned", "return the model (an nn.Module) from the factory.")


def as_module(net, what: str, fix: str):
    """``net`` in eval mode once it is a torch module; else one error: ``what`` (e.g. "f.py:make() returned") a TYPE."""
    import torch

    if not isinstance(net, torch.nn.Module):
        raise EdgesmithError(f"{what} a {type(net).__name__}, not a torch.nn.Module.", fix)
    return net.eval()


@register_source
class TorchFactorySource(ModelSource):
    name = "torch-factory"
    traced = True
    description = "path/to/file.py:factory, a function returning a torch nn.Module (exported to ONNX here)"
    options_help = "the ONNX source's options (kind, frame_seconds, state)"

    def matches(self, spec: str) -> bool:
        return bool(FACTORY_SPEC.fullmatch(spec))

    def load(self, spec: str, request: UserRequest):
        import torch

        from edgesmith.bench.sources.onnx_file import onnx_user_model, prepare

        net = load_factory(spec, request.seed)
        digest = hashlib.sha256(spec.encode() + file_digest(Path(spec.rpartition(":")[0])))
        for name, t in sorted(net.state_dict().items()):
            digest.update(name.encode() + t.detach().cpu().numpy().tobytes())
        with torch.no_grad():
            path, notes = export_to_onnx(net, spec, digest.digest(), request)
        prepared, more = prepare(path)
        return onnx_user_model(prepared, spec, request, notes + more, torch_module=net)
