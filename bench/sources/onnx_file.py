"""A user's ONNX file: opset 13 or newer (older ones are upgraded), external data beside it, several named
inputs and outputs of any dtype, dynamic dimensions, and recurrent state passed as inputs and outputs.

Before anything runs the graph is prepared once (cached by content): an opset below 13 is converted to
13 (per-channel QDQ needs it), ``Constant`` nodes become initializers (exports that keep weights in
Constant nodes, e.g. Paddle's, otherwise show no weights to quantize), and onnx's full checker runs.

Constant inputs (a sample rate, a flag): pinned with ``--model-option const=sr:16000`` or given as a 0-d array of
that name in the data ``.npz``; the prepared copy holds the value as a constant (every deployed file does, and the
report names it), and an ``If`` whose condition it decides is inlined.

Recurrent state: inputs whose next value the graph returns as an output are paired (``h`` -> ``h_out``, ``hn``,
``h_next``, ``next_h``, ``new_h``, ``hN``; ``h0`` -> ``hn``; ``past_key_values.X`` / ``past.X`` -> ``present.X``),
or given with ``--model-option state=h:h_out,c:c_out``. Such a model is fed whole sequences one step at a time;
its data are (samples, time, ...) sequences of the remaining input. The state's batch axis is its one dynamic
dimension (``(layers, batch, hidden)`` works), or given after ``@``: ``state=state:stateN@1``.

Options (``--model-option``): ``kind`` (tensor or stream), ``frame_seconds`` (stream), ``state``, ``const``.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edgesmith.bench.sources.base import (ModelSource, UserRequest, file_digest, register_source, synthetic_evaluation,
                                          work_path)
from edgesmith.common import EdgesmithError, atomic_path, regular_file

MIN_OPSET = 13


def _np_dtype(elem_type: int) -> str:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # an element type numpy has no dtype for (bfloat16, float8...)
        raise EdgesmithError(f"the model has a tensor of ONNX element type {elem_type}, which has no numpy dtype.",
                             "export the model's inputs and outputs as float32 or integer tensors.") from None


def _dims(value_info) -> list:
    tt = value_info.type.tensor_type
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]


def load_checked(path: Path):
    """(the ONNX model at ``path`` with its external data loaded, whether it had external data), or one
    clear error saying what is wrong."""
    import onnx

    regular_file(path, "model file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError and friends: not an ONNX file
        raise EdgesmithError(f"{path} is not a valid ONNX model ({type(e).__name__}).",
                             "re-export it, or check that the file was copied completely.") from None
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    for t in external:
        loc = next((e.value for e in t.external_data if e.key == "location"), None)
        folder = path.parent.resolve()
        if loc is not None and (Path(loc).is_absolute() or not (folder / loc).resolve().is_relative_to(folder)):
            # a data file outside the model's folder is how a hostile model reads other files (onnx refuses too)
            raise EdgesmithError(f"{path} keeps tensor {t.name!r} in an external data file {loc!r} outside the "
                                 f"model's folder {path.parent}; edgesmith (like onnx) reads data files only from "
                                 "there.", "re-save the model with its data file beside it (onnx.save_model(..., "
                                 "save_as_external_data=True, location='NAME.data')).")
        if loc is None or not (path.parent / loc).is_file():
            raise EdgesmithError(f"{path} keeps tensor {t.name!r} in an external data file {loc!r} that is not "
                                 f"next to it in {path.parent}.", "copy the .onnx file together with its data file(s).")
    if external:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(model, str(path.parent))
    return model, bool(external)


def prepare(path: Path, constants: dict | None = None) -> tuple[Path, list[str]]:
    """The model ready for the pipeline (opset >= 13, Constants folded, weights read through no Identity, fully
    checked; ``constants``, {input: value}, pinned) and what was done."""
    import onnx
    from onnx import version_converter

    from edgesmith.compress.onnx_analysis import strip_identities

    model, has_external = load_checked(path)
    notes = _pin_constants(model, constants or {}, path)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < MIN_OPSET:
        try:
            model = version_converter.convert_version(model, MIN_OPSET)
        except Exception as e:
            raise EdgesmithError(f"{path} uses ONNX opset {opset} and could not be upgraded to {MIN_OPSET}: "
                                 f"{str(e).splitlines()[0][:200]}", f"re-export it with opset {MIN_OPSET} or newer.") from None
        notes.append(f"opset {opset} upgraded to {MIN_OPSET} (per-channel quantization needs 13)")
    folded = 0
    kept = []
    for node in model.graph.node:
        value = next((a for a in node.attribute if a.name == "value"), None)
        if node.op_type == "Constant" and value is not None and value.type == onnx.AttributeProto.TENSOR:
            t = onnx.TensorProto()
            t.CopyFrom(value.t)
            t.name = node.output[0]
            model.graph.initializer.append(t)
            folded += 1
        else:
            kept.append(node)
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(kept)
        notes.append(f"{folded} Constant node(s) folded into initializers")
    shared = strip_identities(model, of_initializers=True)
    if shared:
        notes.append(f"{shared} Identity node(s) of a weight removed, their users reading the weight itself (torch's "
                     "exporter writes a weight that several layers share, or that equals another, once and reads the "
                     "other uses through Identity; quantizers see only constant weights)")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        raise EdgesmithError(f"{path} fails onnx's checker: {str(e).strip().splitlines()[0][:200]}",
                             "re-export the model; the file is not valid ONNX.") from None
    if not notes and not has_external:
        return path, notes
    if model.ByteSize() > 1_800_000_000:  # protobuf's 2 GB limit: such a model stays where it is
        if notes:
            raise EdgesmithError(f"{path} is too large to rewrite here ({'; '.join(notes)}).",
                                 f"re-export it with opset {MIN_OPSET} or newer and its weights as initializers.")
        return path, notes
    pinned = ";".join(f"{k}={np.asarray(v).dtype.str}:{np.asarray(v).tolist()!r}"
                      for k, v in sorted((constants or {}).items()))
    out = work_path(file_digest(path) + b"prepared-v2" + pinned.encode(), ".onnx")
    if not out.exists():
        with atomic_path(out, force=True) as tmp:
            onnx.save_model(model, str(tmp))
    if has_external:
        notes.append("external data read from beside the model and kept inline in the prepared copy")
    return out, notes


def _pin_constants(model, constants: dict, path: Path) -> list[str]:
    """Turns each input named in ``constants`` into an initializer holding its value, then inlines the ``If`` nodes
    whose condition that decides (onnxscript's constant folding, never of a (de)quantizer: a quantized weight stays
    quantized); the notes saying so."""
    from onnx import numpy_helper

    if not constants:
        return []
    by_name = {i.name: i for i in model.graph.input}
    notes = []
    for name, value in constants.items():
        inp = by_name.get(name)
        if inp is None:
            raise EdgesmithError(f"const {name!r} names no input of {path.name}.",
                                 f"its inputs: {', '.join(by_name)}.")
        dtype, dims = np.dtype(_np_dtype(inp.type.tensor_type.elem_type)), _dims(inp)
        value = np.asarray(value)
        if value.ndim != len(dims) or any(d is not None and d != v for d, v in zip(dims, value.shape)):
            raise EdgesmithError(f"input {name!r} takes shape {tuple(dims)}; the constant given is {value.shape}.",
                                 "pin a scalar input with --model-option const=NAME:VALUE (or a 0-d array in the .npz).")
        cast = value.astype(dtype)
        if value.dtype.kind in "OUSV" or not np.array_equal(cast, value):
            raise EdgesmithError(f"constant {value.tolist()!r} for input {name!r} is not a {dtype} value.",
                                 f"give a value the input's type {dtype} holds.")
        model.graph.input.remove(inp)
        model.graph.initializer.append(numpy_helper.from_array(cast, name))
        notes.append(f"input {name} pinned to {cast.tolist()!r} ({dtype}): a constant of every deployed file")
    branches = _count_branching(model.graph)
    if branches:
        from onnxscript import optimizer

        keep = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")
        optimizer.fold_constants(model, should_fold=lambda node: False if node.op_type in keep else None)
        optimizer.remove_unused_nodes(model)
        left = _count_branching(model.graph)
        if left < branches:
            notes.append(f"If nodes decided by the pinned input(s) inlined ({branches} -> {left} If/Loop/Scan "
                         "nodes, those inside branches counted), and what they made constant folded")
    return notes


def _count_branching(graph) -> int:
    """If, Loop and Scan nodes of ``graph`` and of the graphs inside them."""
    import onnx

    n = 0
    for node in graph.node:
        n += node.op_type in ("If", "Loop", "Scan")
        for a in node.attribute:
            n += sum(_count_branching(g) for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs))
    return n


def given_constants(request: UserRequest, model_path: Path) -> dict[str, np.ndarray]:
    """{input: value} pinned by ``--model-option const=NAME:VALUE,...`` and by 0-d arrays of an input's name in the
    data .npz files (the same value wherever it is given). The model's input names are read only when a data file
    holds a 0-d array."""
    import onnx

    from edgesmith.models.user_data import read_arrays

    found: dict[str, np.ndarray] = {}

    def put(name, value, where):
        if name in found and not np.array_equal(found[name], value):
            raise EdgesmithError(f"input {name!r} is pinned to {found[name].tolist()!r} and, in {where}, to "
                                 f"{value.tolist()!r}.", "give one value.")
        found[name] = value

    for item in filter(None, str(request.take("const") or "").split(",")):
        name, sep, text = item.partition(":")
        try:
            value = np.asarray(float(text)) if sep else None
        except ValueError:
            value = None
        if value is None or not np.isfinite(value):
            raise EdgesmithError(f"const {item!r} is not NAME:NUMBER.", "e.g. --model-option const=sr:16000.")
        put(name.strip(), np.asarray(int(value)) if value == int(value) else value, "--model-option const")
    input_names = None
    for path in (request.calibration_data, request.eval_data):
        if path is not None and Path(path).suffix == ".npz" and Path(path).is_file():
            for name, arr in read_arrays(path).items():
                if np.ndim(arr) != 0:
                    continue
                if input_names is None:  # the graph without its weights: names are all that is needed
                    try:
                        input_names = {i.name for i in onnx.load(str(model_path), load_external_data=False).graph.input}
                    except Exception:  # not ONNX: prepare's check says so in one line
                        input_names = set()
                if name in input_names:
                    put(name, np.asarray(arr), str(path))
    return found


# next-value names of a state input ``n``, most specific first
STATE_PATTERNS = (lambda n: f"{n}_out", lambda n: f"{n}_next", lambda n: f"next_{n}", lambda n: f"new_{n}",
                  lambda n: f"{n}N", lambda n: f"{n}n", lambda n: re.sub(r"_in$", "_out", n) if n.endswith("_in") else None,
                  lambda n: re.sub(r"0$", "n", n) if n.endswith("0") else None,
                  lambda n: re.sub(r"^past_key_values|^past", "present", n) if n.startswith("past") else None)


def _same_shape(a, b) -> bool:
    """Whether two value infos can hold the same tensor: the same rank, the dims both know equal."""
    da, db = _dims(a), _dims(b)
    return len(da) == len(db) and all(x is None or y is None or x == y for x, y in zip(da, db))


def find_state(inputs: list, outputs: list, given: str | None) -> list[tuple[str, str, int | None]]:
    """(state input, state output, batch axis or None) triples: from ``given`` ("h:h_out,c:c_out@1") or by name and
    shape."""
    out_by_name = {o.name: o for o in outputs}
    in_names = [i.name for i in inputs]
    if given:
        pairs = []
        for item in str(given).split(","):
            pair, at, axis = item.partition("@")
            a, sep, b = pair.partition(":")
            if not sep or a.strip() not in in_names or b.strip() not in out_by_name:
                raise EdgesmithError(f"state pair {item!r} does not name an input and an output of the model.",
                                     f"inputs: {', '.join(in_names)}; outputs: {', '.join(out_by_name)}.")
            if at and not axis.strip().isdigit():
                raise EdgesmithError(f"state pair {item!r}: the batch axis after @ is not a number.",
                                     "e.g. state=state:stateN@1 for a (layers, batch, hidden) state.")
            pairs.append((a.strip(), b.strip(), int(axis) if at else None))
        return pairs
    pairs = []
    for inp in inputs[1:]:
        for pattern in STATE_PATTERNS:
            name = pattern(inp.name)
            o = out_by_name.get(name) if name else None
            if o is not None and _same_shape(o, inp):
                pairs.append((inp.name, name, None))
                break
    return pairs


def onnx_user_model(path: Path, label: str, request: UserRequest, notes: list[str], torch_module=None,
                    pinned=()):
    """The ``UserModel`` of a prepared ONNX file with the request's data; ``torch_module``: the module it was
    exported from (kept for training passes, see ``compress.torch_source``); ``pinned``: the inputs made constants
    (their 0-d arrays in the data files are not samples)."""
    import onnx

    from edgesmith.bench.pipeline.deploy import predictor
    from edgesmith.compress import Artifact
    from edgesmith.compress.onnx_analysis import quantized_ops
    from edgesmith.compress.quant_int4 import int4_layer_counts
    from edgesmith.models.user import UserModel
    from edgesmith.models.user_data import TensorSpec, load_tensors
    from edgesmith.runtimes import get_runtime

    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    outputs = list(model.graph.output)
    pairs = find_state(inputs, outputs, request.take("state"))
    constants = set(pinned or ())
    kind = request.take("kind", "tensor")
    if kind not in ("tensor", "stream"):
        raise EdgesmithError(f"an ONNX model's kind is tensor or stream, not {kind!r}.", "use --model-option kind=stream.")
    frame_seconds = request.take("frame_seconds")
    if kind == "stream" and frame_seconds is None:
        raise EdgesmithError("a stream model needs the seconds of signal in one input frame.",
                             "pass --model-option frame_seconds=0.008 (e.g. a 128-sample hop at 16 kHz).")
    recurrent = None
    state_in = {a for a, _, _ in pairs}
    data_inputs = [i for i in inputs if i.name not in state_in]
    scalar = next((i for i in data_inputs if not _dims(i)), None)
    if scalar is not None:  # a sample rate, a flag: one value for every call, not a batch
        raise EdgesmithError(f"input {scalar.name!r} is a scalar; edgesmith feeds batches of the other inputs.",
                             f"pin its value: --model-option const={scalar.name}:VALUE (or a 0-d array named "
                             f"{scalar.name} in the data .npz).")
    if pairs:
        recurrent = _recurrent_spec(inputs, outputs, pairs, path)
        step = data_inputs[0]
        dims = _dims(step)
        specs = [TensorSpec(step.name, _np_dtype(step.type.tensor_type.elem_type), (None, *dims[1:]), None)]
        notes = notes + [f"recurrent: {', '.join(f'{a} -> {b}' for a, b, _ in pairs)} fed back each step; "
                         f"{step.name} is fed one time step at a time"]
    else:
        specs = []
        for i in data_inputs:
            dims = _dims(i)
            specs.append(TensorSpec(i.name, _np_dtype(i.type.tensor_type.elem_type), tuple(dims[1:]), dims[0]))
    cal = (load_tensors(request.calibration_data, specs, "calibration data", pinned=constants)
           if request.calibration_data else None)
    ev = (load_tensors(request.eval_data, specs, "evaluation data", request.labels, pinned=constants)
          if request.eval_data else None)
    if ev is None and request.labels is not None:
        raise EdgesmithError("--labels were given without --eval-data.", "pass the evaluation inputs with --eval-data.")
    if cal is None and ev is None:  # no data files: --input-shape's synthetic inputs, if given, score fidelity
        ev = synthetic_evaluation(specs, request, _gather_rows(model, {s.name for s in specs}))
        if ev is not None:
            notes = notes + [f"no data files: scored on {len(ev)} {ev.origin}"]
    meta = {"recurrent": recurrent, "inputs": [s.to_dict() for s in specs]}
    art = Artifact("onnx", path=path, meta=meta)
    rt = get_runtime("onnxruntime").load(art)
    reference = predictor(rt, art)
    step_calibration = None
    if recurrent is not None and cal is not None:  # calibrate the step graph on the states it really reaches
        from edgesmith.runtimes.stateful import step_feeds

        step_calibration = step_feeds(rt, recurrent, next(iter(cal.inputs.values())))
    unsupported = {}
    int4_layers = int4_layer_counts(model)
    if not sum(int4_layers.values()):
        unsupported["int4"] = "no MatMul or Gemm with a constant 2-D weight (MatMulNBits would quantize 0 layers)"
    held = quantized_ops(model)
    given_precision = None
    if held:  # measured as it is; quantizing it again would stack a second rounding on the first
        given_precision = "int4" if "MatMulNBits" in held else "int8"
        what = ", ".join(f"{k} {v}" for k, v in held.items())
        notes = notes + [f"the model arrives quantized ({given_precision}: {what}): measured as it is, and only "
                         "variants that do not quantize it again are built"]
        for name in ("int8", "int4", "fp16"):
            unsupported[name] = f"it is already quantized ({what})"
    return UserModel(label=label, kind=kind, native_format="onnx", inputs=specs, path=path, module=torch_module,
                     calibration=cal,
                     evaluation=ev, metric=request.metric, reference=reference, recurrent=recurrent,
                     frame_seconds=frame_seconds, notes=tuple(notes), unsupported=unsupported, int4_layers=int4_layers,
                     seed=request.seed, given_precision=given_precision,
                     step_calibration=step_calibration)


# ops whose first output holds the values of their first input, rearranged (ids reshaped before an embedding)
_SAME_VALUES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose")


def _gather_rows(model, names: set) -> dict[str, int]:
    """{integer input: rows of the constant table it indexes} for inputs used as the indices of a Gather on axis 0 of
    an initializer (an embedding's token ids), directly or through reshapes and integer casts; the smallest table
    when several."""
    from onnx import helper

    from edgesmith.compress.onnx_analysis import INTEGER_TYPES

    tables = {t.name: list(t.dims) for t in model.graph.initializer}
    origin = {n: n for n in names}  # tensor -> the input whose values it holds
    rows = {}
    for node in model.graph.node:  # graph order is topological
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        carries = node.op_type in _SAME_VALUES or (node.op_type == "Cast" and attrs.get("to") in INTEGER_TYPES)
        if carries and node.input and node.input[0] in origin:
            origin[node.output[0]] = origin[node.input[0]]
        elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in origin:
            dims = tables.get(node.input[0])
            if attrs.get("axis", 0) == 0 and dims and dims[0] > 0:
                src = origin[node.input[1]]
                rows[src] = min(rows.get(src, dims[0]), dims[0])
    return rows


def _recurrent_spec(inputs, outputs, pairs, path) -> dict:
    by_name = {i.name: i for i in inputs}
    shapes, axes, dtypes = {}, {}, {}
    for a, _, given in pairs:
        dims = _dims(by_name[a])
        dynamic = [k for k, d in enumerate(dims) if d is None]
        axis = given if given is not None else dynamic[0] if dynamic else 0
        if axis >= len(dims):
            raise EdgesmithError(f"state input {a!r} has {len(dims)} dimensions; it has no batch axis {axis}.",
                                 f"give an axis below {len(dims)} after @.")
        rest = [d for k, d in enumerate(dims) if k != axis]
        if any(d is None for d in rest):
            raise EdgesmithError(f"state input {a!r} has more than one dynamic dimension ({dims}).",
                                 "export the state with fixed sizes except the batch, or name its batch axis "
                                 f"(state={a}:OUTPUT@AXIS) if the others are fixed in practice.")
        shapes[a], axes[a] = rest, axis
        dtypes[a] = _np_dtype(by_name[a].type.tensor_type.elem_type)
    step_out = next((o.name for o in outputs if o.name not in {b for _, b, _ in pairs}), None)
    step_in = next((i.name for i in inputs if i.name not in shapes), None)
    if step_in is None or step_out is None:
        raise EdgesmithError(f"{path}: every input or output is state; there is no step input or output.",
                             "name the state pairs with --model-option state=in:out.")
    return {"input": step_in, "output": step_out, "state": [[a, b] for a, b, _ in pairs], "state_shapes": shapes,
            "state_batch_axes": axes, "state_dtypes": dtypes}


@register_source
class OnnxFileSource(ModelSource):
    name = "onnx"
    description = "an ONNX file (opset >= 13 or upgraded; external data beside it; several inputs; recurrent state)"
    options_help = "kind=tensor|stream, frame_seconds=S (stream), state=in:out[@axis],..., const=name:value,..."

    def matches(self, spec: str) -> bool:
        return spec.endswith(".onnx")

    def load(self, spec: str, request: UserRequest):
        path = Path(spec)
        regular_file(path, "model file")  # before a data file is read for the constants it may hold
        constants = given_constants(request, path)
        prepared, notes = prepare(path, constants)
        return onnx_user_model(prepared, path.name, request, notes, pinned=constants)
