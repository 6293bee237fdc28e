"""Shared measuring tools of the compression passes: weight layers, SQNR, captured tensors, bit counts.

The int8, int4 and pruning passes all report the same things (which weight tensors they touched,
how many bits each stored weight costs, how far the result drifted from fp32), so the pieces live
here once:

* ``find_weight_layers`` lists the weight-carrying nodes (MatMul, Gemm, Conv) of an ONNX graph,
  with the constant weight when there is one and the reason when there is not.
* ``sqnr_db`` is the signal-to-quantization-noise ratio used for both weights and layer outputs.
* ``capture_tensors`` / ``output_sqnr`` expose intermediate tensors as extra graph outputs of an
  in-memory copy of a model and compare two models tensor by tensor.
* ``tensor_bits`` / ``bits_per_weight`` do the storage accounting from the tensors a file holds.
* ``quiet_onnxruntime`` keeps onnxruntime's quantization tools from printing to the console.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from edgesmith.compress.base import LayerReport
from edgesmith.common import EdgesmithError, scratch_dir

WEIGHT_OPS = ("MatMul", "Gemm", "Conv")

# Bits one element of an ONNX tensor type occupies on disk (sub-byte types are packed).
_DTYPE_BITS = {
    onnx.TensorProto.FLOAT: 32, onnx.TensorProto.FLOAT16: 16, onnx.TensorProto.BFLOAT16: 16,
    onnx.TensorProto.DOUBLE: 64, onnx.TensorProto.INT8: 8, onnx.TensorProto.UINT8: 8,
    onnx.TensorProto.INT16: 16, onnx.TensorProto.UINT16: 16, onnx.TensorProto.INT32: 32,
    onnx.TensorProto.UINT32: 32, onnx.TensorProto.INT64: 64, onnx.TensorProto.UINT64: 64,
    onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4, onnx.TensorProto.BOOL: 8,
}


# --- graph inspection ---------------------------------------------------------------------------


@dataclass
class WeightLayer:
    """One weight-carrying node: its name, output tensor and constant weight (if it has one).

    ``weight`` is None when the node's weight input is not a constant initializer (computed at run
    time, or fed by another node); ``reason`` then says so, and quantizers skip the layer.
    """

    node_name: str
    op_type: str
    output: str
    weight_name: str | None
    weight: np.ndarray | None
    reason: str = ""
    subgraph: str = ""  # where the node sits when not in the main graph: "If 'cond' then_branch"

    @property
    def n_params(self) -> int | None:
        return None if self.weight is None else int(self.weight.size)


def load_model(path: str | Path) -> onnx.ModelProto:
    try:
        return onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError, OSError, ...: all mean "not a readable model"
        raise EdgesmithError(f"could not read ONNX model {path}: {type(e).__name__}.",
                             "re-run the export step that wrote it.") from None


def constant_arrays(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Every constant of ``graph`` by name: its initializers and the values of its Constant nodes."""
    out = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    out[node.output[0]] = numpy_helper.to_array(attr.t)
    return out


def node_attr(node: onnx.NodeProto, name: str, default=None):
    """The value of ``node``'s attribute ``name``, or ``default`` when it has none."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def graph_input_name(model: onnx.ModelProto) -> str:
    """The model's one data input (initializers listed as inputs, as old exporters do, are ignored)."""
    inits = set(initializers(model))
    names = [i.name for i in model.graph.input if i.name not in inits]
    if len(names) != 1:
        raise EdgesmithError(f"the model has {len(names)} data inputs; the compression passes handle one.",
                             "export a model with a single input tensor.")
    return names[0]


def data_inputs(model: onnx.ModelProto) -> list[tuple[str, np.dtype, list]]:
    """(name, numpy dtype, dims with None for dynamic) of every data input, in graph order."""
    inits = set(initializers(model))
    out = []
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
        out.append((i.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims))
    return out


def batched_feeds(model: onnx.ModelProto, x, batch: int = 64) -> list[dict[str, np.ndarray]]:
    """``x`` (one array, or a dict by input name) cut into feeds of ``batch`` samples, or of the model's own
    batch when its first dimension is fixed (samples that do not fill a last batch are then left out)."""
    inputs = data_inputs(model)
    if not isinstance(x, dict):
        if len(inputs) != 1:
            raise EdgesmithError(f"the model takes {len(inputs)} inputs ({', '.join(n for n, _, _ in inputs)}) but "
                                 "one array was given.", "give one array per input name (an .npz or a dict).")
        x = {inputs[0][0]: x}
    missing = [n for n, _, _ in inputs if n not in x]
    if missing:
        raise EdgesmithError(f"data for input(s) {', '.join(missing)} are missing.",
                             "name the arrays after the model's inputs.")
    from edgesmith.common import Feeds, batch_axes, n_samples, sample_slice

    fixed = inputs[0][2][0] if inputs[0][2] else None
    step = fixed or batch
    n = n_samples(x)
    stop = n - n % step if fixed else n
    types = {name: dtype for name, dtype, _ in inputs}
    return [{name: np.ascontiguousarray(np.asarray(v).astype(types[name], copy=False))
             for name, v in sample_slice(Feeds({k: x[k] for k in types}, batch_axes(x)), i, i + step).items()}
            for i in range(0, stop, step)]


INTEGER_TYPES = frozenset({onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
                           onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32,
                           onnx.TensorProto.UINT64})  # ONNX element types of integer tensors


def strip_identities(model: onnx.ModelProto, *, of_initializers: bool = False) -> int:
    """Remove top-level ``Identity`` nodes in place, feeding their consumers (in subgraphs too) the Identity's input:
    exporters put them in front of Conv biases and weights, where they stop onnxruntime from fusing QDQ pairs into
    integer kernels, and torch's exporter reads a shared or repeated weight through one, where quantizers take the
    weight for a run-time value. ``of_initializers``: only those whose input is an initializer. An Identity that
    produces a graph output stays. Returns how many were removed."""
    outputs = {o.name for o in model.graph.output}
    inits = {t.name for t in model.graph.initializer}
    alias = {}
    keep = []
    for node in model.graph.node:
        source = alias.get(node.input[0], node.input[0]) if node.op_type == "Identity" and node.input else None
        if source is not None and node.output[0] not in outputs and (not of_initializers or source in inits):
            alias[node.output[0]] = source
        else:
            keep.append(node)
    if not alias:
        return 0
    del model.graph.node[:]
    model.graph.node.extend(keep)
    for graph, _, _ in graphs_with_scope(model):
        for node in graph.node:
            for i, name in enumerate(node.input):
                if name in alias:
                    node.input[i] = alias[name]
    for vi in [v for v in model.graph.value_info if v.name in alias]:
        model.graph.value_info.remove(vi)
    return len(alias)


INTEGER_KERNELS = ("QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QGemm", "DynamicQuantizeMatMul",
                   "MatMulIntegerToFloat", "QAttention", "MatMulNBits")


def fused_kernels(path) -> dict:
    """What onnxruntime actually runs after its graph optimizations: integer kernels vs float Conv/MatMul/Gemm
    left (a QDQ model whose pairs were not fused computes in fp32 between quantize/dequantize)."""
    import collections

    import onnxruntime as ort

    with quiet_onnxruntime(), scratch_dir("opt") as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        so.log_severity_level = 3
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        ops = collections.Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)
    integer = {k: v for k, v in ops.items() if k in INTEGER_KERNELS}
    floats = {k: v for k, v in ops.items() if k in ("Conv", "MatMul", "Gemm", "FusedConv", "FusedMatMul", "FusedGemm")}
    return {"integer_kernels": integer, "float_kernels": floats,
            "integer": int(sum(integer.values())), "float": int(sum(floats.values()))}


def graphs_with_scope(model: onnx.ModelProto) -> Iterator[tuple[onnx.GraphProto, str, dict]]:
    """The main graph and every subgraph (If branches, Loop and Scan bodies, nested), each with where it sits ("" for
    the main graph) and the initializers it can read: its own and those of the graphs around it."""
    def walk(graph, where: str, outer: dict):
        scope = {**outer, **{t.name: t for t in graph.initializer}}
        yield graph, where, scope
        for node in graph.node:
            for a in node.attribute:
                for k, g in enumerate(([a.g] if a.HasField("g") else []) + list(a.graphs)):
                    label = f"{node.op_type} {node.name!r} {a.name}" + (f"[{k}]" if len(a.graphs) > 1 else "")
                    yield from walk(g, f"{where} > {label}" if where else label, scope)

    yield from walk(model.graph, "", {})


def find_weight_layers(model: onnx.ModelProto, op_types: Iterable[str] = WEIGHT_OPS, *,
                       subgraphs: bool = False) -> list[WeightLayer]:
    """Every MatMul/Gemm/Conv node in graph order, with its constant weight (input 1) if present; with ``subgraphs``,
    those inside If/Loop/Scan bodies too (after the main graph's, each marked with where it sits)."""
    layers = []
    for graph, where, inits in graphs_with_scope(model) if subgraphs else [(model.graph, "", initializers(model))]:
        for node in graph.node:
            if node.op_type not in op_types or len(node.input) < 2:
                continue
            wname = node.input[1]
            if wname in inits:
                layers.append(WeightLayer(node.name, node.op_type, node.output[0], wname,
                                          numpy_helper.to_array(inits[wname]), subgraph=where))
            else:
                layers.append(WeightLayer(node.name, node.op_type, node.output[0], None, None, subgraph=where,
                                          reason="its weight is computed at run time, not a constant initializer"))
    return layers


def check_node_names(model: onnx.ModelProto, names: Iterable[str], field_name: str) -> None:
    """Reject node names (``exclude`` lists) that the model does not contain."""
    known = {n.name for graph, _, _ in graphs_with_scope(model) for n in graph.node}
    unknown = sorted(set(names) - known)
    if unknown:
        candidates = [layer.node_name for layer in find_weight_layers(model)]
        raise EdgesmithError(f"{field_name} names node(s) not in the model: {', '.join(unknown)}.",
                             f"use node names of this model, e.g. {', '.join(candidates[:6]) or '(none)'}.")


# --- error measures -----------------------------------------------------------------------------


def sqnr_db(reference: np.ndarray, approx: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (ref - approx)^2) in dB; +inf when the two are identical."""
    ref = np.asarray(reference, dtype=np.float64)
    err = ref - np.asarray(approx, dtype=np.float64)
    noise = float(np.sum(err * err))
    signal = float(np.sum(ref * ref))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def report_db(value: float | None) -> float | None:
    """An SQNR as it goes into a report: rounded, and None for "exact" (JSON has no infinity)."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 3)


def with_extra_outputs(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """An in-memory copy of ``model`` that also returns the tensors ``names`` (of any element type: the outputs
    are declared without a type and onnxruntime takes the producer's)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    present = {o.name for o in m.graph.output}
    for name in names:
        if name not in present:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
            present.add(name)
    return m


def capture_tensors(model: onnx.ModelProto, names: list[str], x, batch: int | None = 256) -> dict[str, np.ndarray]:
    """Run ``model`` on ``x`` (batch first; one array or a dict by input name) and return the named
    intermediate tensors, concatenated; ``batch`` None: ``x`` is one call's feed, run as it is."""
    import onnxruntime as ort

    m = with_extra_outputs(model, names)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for feed in batched_feeds(model, x, batch) if batch is not None else [x]:
        outs = sess.run(names, feed)
        for n, v in zip(names, outs):
            parts[n].append(np.asarray(v))
    return {n: np.concatenate(v) for n, v in parts.items()}


def output_sqnr(reference: onnx.ModelProto, candidate: onnx.ModelProto, names: list[str],
                x: np.ndarray) -> dict[str, float]:
    """Per-tensor SQNR (dB) of ``candidate`` against ``reference`` for tensors present in both."""
    def produced(m):
        return {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input}

    common = [n for n in names if n in produced(reference) and n in produced(candidate)]
    if not common:
        return {}
    ref = capture_tensors(reference, common, x)
    cand = capture_tensors(candidate, common, x)
    return {n: sqnr_db(ref[n], cand[n]) for n in common}


# --- storage accounting -------------------------------------------------------------------------


def tensor_bits(tensor: onnx.TensorProto) -> int:
    """Bits the tensor's elements occupy in the file: element count x element width (no protobuf overhead)."""
    if tensor.data_type not in _DTYPE_BITS:
        raise ValueError(f"no bit width known for ONNX type {onnx.TensorProto.DataType.Name(tensor.data_type)}")
    return int(np.prod(tensor.dims, dtype=np.int64)) * _DTYPE_BITS[tensor.data_type]


def bits_per_weight(layers: list[LayerReport]) -> float | None:
    """Bits per original weight over the layers that were quantized/pruned (skipped ones excluded)."""
    done = [layer for layer in layers if layer.action != "skipped" and layer.n_params]
    total = sum(layer.n_params for layer in done)
    if total == 0:
        return None
    return sum(layer.bits_per_weight * layer.n_params for layer in done) / total


# --- console hygiene ----------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_onnxruntime() -> Iterator[None]:
    """Silence onnxruntime.quantization's logging and prints (it logs INFO per node, prints histograms)."""
    root = logging.getLogger()
    loggers = [root] + [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
                        if n.startswith("onnxruntime")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for lg, lvl in zip(loggers, levels):
            lg.setLevel(lvl)


@contextlib.contextmanager
def scratch_cwd() -> Iterator[None]:
    """Run inside a temporary working directory (for library code that writes debug files into the cwd)."""
    with scratch_dir("scratch") as scratch, contextlib.chdir(scratch):
        yield


def _subgraphs(node) -> list:
    return [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH] + \
        [g for a in node.attribute if a.type == onnx.AttributeProto.GRAPHS for g in a.graphs]


def _outer_names(graph) -> set:
    """Names a subgraph reads from the scopes around it (its nodes' inputs, nested subgraphs' too, that it does not
    define itself)."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    used = set()
    for n in graph.node:
        used.update(n.input)
        for sub in _subgraphs(n):
            used |= _outer_names(sub)
        defined.update(n.output)
    return used - defined


def _sort_graph(graph, outer: set) -> bool:
    ready = outer | {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    needs = {id(n): set(n.input).union(*(_outer_names(g) for g in _subgraphs(n))) for n in pending}
    while pending:
        progress = [n for n in pending if needs[id(n)] <= ready]
        if not progress:
            return False
        for n in progress:
            ordered.append(n)
            ready.update(n.output)
        pending = [n for n in pending if all(n is not p for p in progress)]
    scope = set(ready)
    if not all(_sort_graph(g, scope) for n in ordered for g in _subgraphs(n)):
        return False
    _replace_nodes(graph, ordered)
    return True


def _replace_nodes(graph, nodes: list) -> None:
    """Make ``nodes`` (messages that may be ``graph``'s own) the graph's node list, in that order: copied first, as
    clearing the repeated field would otherwise take them with it."""
    copies = []
    for n in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        copies.append(c)
    del graph.node[:]
    graph.node.extend(copies)


def topologically_sorted(model: onnx.ModelProto) -> bool:
    """Put ``model``'s nodes in dependency order in place, in every subgraph too, a node with subgraphs placed after
    what they read from outside (quantizers add nodes at the top level that an If's branches read); False when the
    graph has a cycle."""
    return _sort_graph(model.graph, set())


def check_written(path) -> list[str]:
    """onnx's full checker on a file a pass wrote; a graph whose only fault is its node order is re-sorted
    and rewritten (what was done is returned as notes); anything else is an error naming the file."""
    model = onnx.load(str(path))
    try:
        onnx.checker.check_model(model, full_check=True)
        return []
    except Exception as e:  # ValidationError / InferenceError: re-sort once, then give up clearly
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    if topologically_sorted(model):
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception:  # still invalid after sorting: report the original reason below
            pass
        else:
            onnx.save(model, str(path))
            return ["nodes re-sorted into dependency order so the file passes onnx's checker"]
    raise EdgesmithError(f"the model written to {path} fails onnx's checker: {first}",
                         "report this model; the pass produced an invalid graph.")


def _readers(graph) -> dict[str, list]:
    """{tensor name: the nodes of ``graph`` that read it}, a node whose subgraph reads an outer name included."""
    readers: dict[str, list] = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
        for sub in _subgraphs(node):
            for i in _outer_names(sub):
                readers.setdefault(i, []).append(node)
    return readers


def fold_batch_norms(model: onnx.ModelProto) -> int:
    """Fold every inference-mode ``BatchNormalization`` that alone reads a ``Conv``'s output into that Conv's weight
    and bias, in place (exact algebra, as onnxruntime does for fp32 at load): a quantizer otherwise leaves each BN in
    fp32 between two integer Convs, a dequantize/quantize round trip per layer (Paddle's exports keep their BNs).
    The Conv keeps its name; the BN's readers read the Conv. Returns how many were folded."""
    g = model.graph
    nodes = list(g.node)  # one wrapper per node: identities below are of these
    inits = {t.name: t for t in g.initializer}
    readers = {name: len(nodes_) for name, nodes_ in _readers(g).items()}
    producer = {o: n for n in nodes for o in n.output}
    outputs = {o.name for o in g.output}
    rename, drop = {}, set()
    for bn in nodes:
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1 or len(bn.input) != 5:
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or readers.get(conv.output[0], 0) != 1 or conv.output[0] in outputs:
            continue
        params = [inits.get(n) for n in bn.input[1:]] + [inits.get(conv.input[1])]
        if any(p is None for p in params) or (len(conv.input) > 2 and conv.input[2] not in inits):
            continue
        if readers.get(conv.input[1], 0) != 1 or (len(conv.input) > 2 and readers.get(conv.input[2], 0) != 1):
            continue  # a weight another node also reads stays as it is
        gamma, beta, mean, var, w = (numpy_helper.to_array(p).astype(np.float64) for p in params)
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        scale = gamma / np.sqrt(var + eps)
        bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 else 0.0
        dtype = numpy_helper.to_array(params[-1]).dtype
        inits[conv.input[1]].CopyFrom(numpy_helper.from_array(
            (w * scale.reshape(-1, *([1] * (w.ndim - 1)))).astype(dtype), conv.input[1]))
        new_bias = ((bias - mean) * scale + beta).astype(dtype)
        if len(conv.input) > 2:
            inits[conv.input[2]].CopyFrom(numpy_helper.from_array(new_bias, conv.input[2]))
        else:
            name = f"{conv.output[0]}_folded_bn_bias"
            g.initializer.append(numpy_helper.from_array(new_bias, name))
            conv.input.append(name)
        if bn.output[0] in outputs:  # the graph's output keeps its name: the Conv writes it
            rename[conv.output[0]] = bn.output[0]
            conv.output[0] = bn.output[0]
        else:
            rename[bn.output[0]] = conv.output[0]
        drop.add(id(bn))
    if not drop:
        return 0
    kept = [n for n in nodes if id(n) not in drop]

    def rewire(graph):
        for node in graph.node:
            for k, name in enumerate(node.input):
                if name in rename and name not in {o for o in node.output}:
                    node.input[k] = rename[name]
            for sub in _subgraphs(node):
                rewire(sub)

    _replace_nodes(g, kept)
    rewire(g)
    used = {i for n in g.node for i in n.input} | {i for n in g.node for s in _subgraphs(n) for i in _outer_names(s)}
    unused = [t for t in g.initializer if t.name not in used and t.name not in {i.name for i in g.input}]
    for t in unused:
        g.initializer.remove(t)
    return len(drop)


# operators that hold or compute quantized values: a model with any of them arrives quantized
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                           "ConvInteger", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul",
                           "MatMulNBits", "QLinearAdd", "QLinearMul", "QGemm", "DynamicQuantizeLSTM", "QAttention"})


def quantized_ops(model: onnx.ModelProto) -> dict[str, int]:
    """{quantized operator type: how many} in ``model``, subgraphs included, most frequent first."""
    counts: dict[str, int] = {}

    def walk(graph):
        for node in graph.node:
            if node.op_type in QUANTIZED_OPS:
                counts[node.op_type] = counts.get(node.op_type, 0) + 1
            for sub in _subgraphs(node):
                walk(sub)

    walk(model.graph)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def as_quantizable_ops(model: onnx.ModelProto) -> dict[str, int]:
    """Rewrite, in place, operators onnxruntime has no integer kernel for into ones it has, with the same values:
    ``Div`` by a constant -> ``Mul`` by its reciprocal, ``HardSigmoid`` -> ``Mul``, ``Add``, ``Clip``. A quantizer that
    takes every operator type can then keep a mobile network's HardSwish/HardSigmoid/SE chains in int8 instead of
    leaving the graph through a dequantize/quantize pair at each. Node names are kept (the Mul or the Clip takes the
    rewritten node's name). Returns {what: how many}."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    counts = {"Div": 0, "HardSigmoid": 0}
    out = []
    for node in list(g.node):
        if node.op_type == "Div" and len(node.input) == 2 and node.input[1] in inits:
            c = numpy_helper.to_array(inits[node.input[1]])
            if c.dtype.kind == "f" and np.all(c != 0):
                name = f"{node.input[1]}_reciprocal"
                if name not in inits:
                    inits[name] = numpy_helper.from_array((1.0 / c.astype(np.float64)).astype(c.dtype), name)
                    g.initializer.append(inits[name])
                new = onnx.NodeProto()
                new.CopyFrom(node)
                new.op_type, new.input[1] = "Mul", name
                out.append(new)
                counts["Div"] += 1
                continue
        if node.op_type == "HardSigmoid" and not node.domain:
            alpha = next((a.f for a in node.attribute if a.name == "alpha"), 0.2)
            beta = next((a.f for a in node.attribute if a.name == "beta"), 0.5)
            base = node.output[0]
            for suffix, v in (("_alpha", alpha), ("_beta", beta), ("_zero", 0.0), ("_one", 1.0)):
                g.initializer.append(numpy_helper.from_array(np.array(v, np.float32), base + suffix))
            out += [onnx.helper.make_node("Mul", [node.input[0], base + "_alpha"], [base + "_scaled"],
                                          name=node.name + "/mul"),
                    onnx.helper.make_node("Add", [base + "_scaled", base + "_beta"], [base + "_shifted"],
                                          name=node.name + "/add"),
                    onnx.helper.make_node("Clip", [base + "_shifted", base + "_zero", base + "_one"], [base],
                                          name=node.name)]
            counts["HardSigmoid"] += 1
            continue
        out.append(node)
    if any(counts.values()):
        _replace_nodes(g, out)
    return {k: v for k, v in counts.items() if v}


def drop_output_quantizers(model: onnx.ModelProto, quantized_types: Iterable[str]) -> int:
    """Remove, in place, each activation's QuantizeLinear -> DequantizeLinear pair that no node of
    ``quantized_types`` reads (in the top graph): the requantization of a layer's output that only float nodes use.
    onnxruntime needs that pair to fuse a layer into one integer kernel; OpenVINO instead fuses quantizers on a
    layer's inputs and leaves such a pair as a round trip of its own. Weights' DequantizeLinear nodes and pairs that
    feed a graph output stay. Returns how many nodes were removed."""
    g = model.graph
    quantized_types = set(quantized_types)
    producer = {o: n for n in g.node for o in n.output}
    readers = _readers(g)
    outputs = {o.name for o in g.output}
    rename, drop = {}, set()
    for q in g.node:
        src = producer.get(q.input[0]) if q.op_type == "QuantizeLinear" else None
        if src is None or src.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue  # an initializer's or a graph input's quantizer, or not a quantizer at all
        dqs = readers.get(q.output[0], [])
        if not dqs or any(d.op_type != "DequantizeLinear" or d.output[0] in outputs for d in dqs):
            continue
        if any(r.op_type in quantized_types for d in dqs for r in readers.get(d.output[0], [])):
            continue
        drop.update(id(n) for n in (q, *dqs))
        rename.update({d.output[0]: q.input[0] for d in dqs})
    if not drop:
        return 0

    def rewire(graph):
        for node in graph.node:
            for k, name in enumerate(node.input):
                if name in rename:
                    node.input[k] = rename[name]
            for sub in _subgraphs(node):
                rewire(sub)

    _replace_nodes(g, [n for n in g.node if id(n) not in drop])
    rewire(g)
    return len(drop)


def layer_data_inputs(model: onnx.ModelProto, layers: list[WeightLayer]) -> dict[str, str | None]:
    """{node name: the activation it reads (its first input that is not an initializer)} for the main graph's
    ``layers``: where the error arriving at a layer is measured."""
    inits = {t.name for t in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    return {layer.node_name: next((i for i in nodes[layer.node_name].input if i and i not in inits), None)
            for layer in layers if layer.node_name in nodes and not layer.subgraph}


def restore_order(layers: list[LayerReport]) -> list[dict]:
    """The quantized layers, most harmful first: the relative noise power each adds across itself on the calibration
    samples (10^(-output SQNR/10) - 10^(-input SQNR/10), exact inputs counting as noiseless), the ranking a
    goal-driven deploy restores layers by. In noise power, not dB: a first layer that takes exact inputs to 37 dB adds
    0.0002, a layer that takes 20 dB to 15 dB adds 0.02."""
    rows = []
    for layer in layers:
        out_db = layer.error.get("output_sqnr_db")
        if layer.action != "quantized" or out_db is None:
            continue
        in_db = layer.error.get("input_sqnr_db")
        added = 10 ** (-out_db / 10) - (0.0 if in_db is None else 10 ** (-in_db / 10))
        rows.append({"layer": layer.name, "noise_added": float(f"{max(added, 0.0):.4g}")})
    return sorted(rows, key=lambda r: -r["noise_added"])
