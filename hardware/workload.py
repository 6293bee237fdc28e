"""Workload extraction: what one inference costs in MACs, bytes and (for Lava) spiking activity.

Three sources, one ``Workload`` type the cost models read:

- ``workload_from_onnx``: graph analysis of an exported model (fp32, int8 QDQ, int4 MatMulNBits).
- ``workload_from_module``: a forward pass of a torch module with hooks on its Linear/Conv layers.
- ``workload_from_activity``: the activity counters a Lava simulation reports.

Conventions (the cost models rely on them): ``macs`` and ``activation_bytes`` are per sample;
``weight_bytes`` is read once per call, whatever the batch; ``batch`` says how many samples one
call processes. Symbolic dimensions (the dynamic batch axis, any other unnamed size) count as 1,
so an ONNX file exported with a dynamic batch yields per-sample figures.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from edgesmith.hardware.base import Workload
from edgesmith.common import EdgesmithError

_MATMUL_LIKE = {"MatMul", "MatMulInteger", "QLinearMatMul", "MatMulNBits", "Gemm", "MatMulIntegerToFloat"}
_CONV_LIKE = {"Conv", "ConvInteger", "QLinearConv"}
_RECURRENT = {"LSTM", "GRU", "RNN"}
_INT8_MARKERS = {"QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "QLinearConv", "MatMulInteger",
                 "ConvInteger", "DynamicQuantizeLinear"}
ACTIVITY_KEYS = ("synops", "neuron_updates", "messages", "timesteps")


# --- ONNX ------------------------------------------------------------------------------------------


def workload_from_onnx(path, batch: int = 1, precision: str | None = None, input_shapes: dict | None = None,
                       example: dict | None = None) -> Workload:
    """Count MACs, weight/activation bytes and compute layers of the ONNX model at ``path``.

    ``input_shapes`` ({input name: full shape, batch 1 first}) fixes the graph's dynamic dimensions before
    shape inference (a sequence length, an image size taken from the user's data); dimensions left
    dynamic count as 1. Shapes inference cannot give (after an If, a Loop, a Scan, torch's Unflatten) are read
    off one onnxruntime run on ``example`` ({input: array}, one call's feed), else on zeros; a layer whose shapes
    are still unknown is left out of the count, and ``source`` says which (the MACs are then a lower bound).

    MACs come from MatMul/Gemm/Conv/MatMulNBits (and their integer/QLinear forms) using
    initializer shapes and shape inference. Weight bytes are the stored bytes of every initializer
    (so packed 4-bit MatMulNBits weights, their scales and zero points count at their real size).
    ``precision`` overrides the one read from the graph (MatMulNBits -> int4, QDQ/QLinear -> int8).
    """
    import onnx

    path = Path(path)
    if batch < 1:
        raise EdgesmithError(f"batch must be at least 1, got {batch}.", "pass a positive batch size.")
    if not path.is_file():
        raise EdgesmithError(f"ONNX model {path} does not exist.", "check the path or re-run the export.")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError, ValueError, ... for a corrupt file
        raise EdgesmithError(f"could not read {path} as ONNX ({type(e).__name__}).",
                             "re-export the model; the file is corrupt or not ONNX.") from None
    if input_shapes:
        _fix_input_dims(model, input_shapes)
    model = _infer_shapes(model)
    graph = model.graph
    from edgesmith.compress.onnx_analysis import constant_arrays

    consts = constant_arrays(graph)
    shapes, dtypes = _value_shapes(graph, consts)
    missing = _unshaped(graph, shapes)
    if missing:  # shape inference could not follow the graph (e.g. torch's Unflatten): run it once instead
        shapes.update(_run_for_shapes(model, missing, example))
    batch_div = _graph_batch(graph)

    macs = 0.0
    n_layers = 0
    uncounted = []
    for node in graph.node:
        try:
            node_macs = _node_macs(node, shapes)
        except EdgesmithError:  # a cost estimate with a known gap beats no deploy
            uncounted.append(node.name or node.output[0])
            continue
        if node_macs is not None:
            macs += node_macs
            n_layers += 1

    weight_bytes = float(sum(arr.nbytes for arr in consts.values()))
    act_bytes = 0.0
    for name in _activation_names(graph, consts):
        shape = shapes.get(name)
        if shape is None or name not in dtypes:
            continue
        act_bytes += float(np.prod(shape, dtype=np.float64)) * dtypes[name]

    ops = {n.op_type for n in graph.node}
    inferred = "int4" if "MatMulNBits" in ops else "int8" if ops & _INT8_MARKERS else (
        "fp16" if any(a.dtype == np.float16 for a in consts.values()) else "fp32")
    return Workload(
        macs=macs / batch_div, weight_bytes=weight_bytes, activation_bytes=act_bytes / batch_div,
        precision=precision or inferred, n_layers=n_layers, batch=int(batch),
        source=f"ONNX graph analysis of {path.name} (MACs from {n_layers} MatMul/Gemm/Conv-type and recurrent nodes"
               + (", dynamic dimensions from the example inputs" if input_shapes else "")
               + (f", {len(missing)} shape(s) read off one onnxruntime run on "
                  + ("the example inputs" if example else "zeros") if missing else "")
               + (f"; MACs of {len(uncounted)} layer(s) whose shapes stay unknown not counted, so a lower bound: "
                  + ", ".join(uncounted[:3]) + (" ..." if len(uncounted) > 3 else "") if uncounted else "") + ")",
    )


def _fix_input_dims(model, input_shapes: dict) -> None:
    """Set the dims of the named graph inputs to ``input_shapes`` (only where they are dynamic)."""
    for vi in model.graph.input:
        shape = input_shapes.get(vi.name)
        if shape is None or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for d, n in zip(dims, shape):
            if not (d.HasField("dim_value") and d.dim_value > 0):
                d.Clear()
                d.dim_value = int(n)


def _infer_shapes(model):
    """Shape inference that also knows onnxruntime's contrib ops (MatMulNBits); falls back to onnx's."""
    import onnx

    from edgesmith.compress.onnx_analysis import scratch_cwd

    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        with scratch_cwd():  # where it gives up it dumps sym_shape_infer_temp.onnx + .data files into the cwd
            return SymbolicShapeInference.infer_shapes(model, auto_merge=True)
    except Exception:  # symbolic inference rejects some graphs; plain inference still gives most shapes
        try:  # data propagation follows Shape -> Gather -> Concat -> Reshape chains (torch's Unflatten, view)
            return onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:
            return model


def _dims(type_proto) -> list[int] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
            for d in type_proto.tensor_type.shape.dim]


def _value_shapes(graph, consts) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Per-sample shape and element size of every named tensor the graph knows about."""
    from edgesmith.compress.onnx_analysis import node_attr
    from onnx import helper

    shapes: dict[str, list[int]] = {k: list(v.shape) for k, v in consts.items()}
    dtypes: dict[str, int] = {k: v.itemsize for k, v in consts.items()}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        dims = _dims(vi.type)
        if dims is not None and vi.name not in consts:
            shapes[vi.name] = dims
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if elem:
            dtypes.setdefault(vi.name, np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize)
    for node in graph.node:  # MatMulNBits outputs when only plain shape inference ran
        if node.op_type == "MatMulNBits" and node.output[0] not in shapes and node.input[0] in shapes:
            n = node_attr(node, "N")
            shapes[node.output[0]] = shapes[node.input[0]][:-1] + [int(n)]
            dtypes.setdefault(node.output[0], dtypes.get(node.input[0], 4))
    return shapes, dtypes


def _unshaped(graph, shapes) -> list[str]:
    """Inputs and outputs of MatMul/Gemm/Conv-type and recurrent nodes whose shapes inference left unknown."""
    names = []
    for node in graph.node:
        if node.op_type in _MATMUL_LIKE or node.op_type in _CONV_LIKE or node.op_type in _RECURRENT:
            names += [n for n in (node.input[0], node.output[0]) if n and n not in shapes and n not in names]
    return names


def _run_for_shapes(model, names: list[str], example: dict | None = None) -> dict[str, list[int]]:
    """Shapes of ``names`` from one onnxruntime run on ``example`` (one call's feed), else on zero inputs (dynamic
    dims as 1); {} if it cannot run."""
    from onnx import helper

    from edgesmith.compress.onnx_analysis import capture_tensors, quiet_onnxruntime

    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = np.zeros(dims, helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    if example and set(example) == set(feeds):
        feeds = dict(example)
    try:
        with quiet_onnxruntime():
            return {n: list(v.shape) for n, v in capture_tensors(model, names, feeds, batch=None).items()}
    except Exception:  # a graph onnxruntime cannot run: the MAC count then names the unknown node
        return {}


def _graph_batch(graph) -> int:
    """A fixed (non-symbolic) leading dimension of the first input: counts are divided by it."""
    for vi in graph.input:
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 1:
            return int(dims[0].dim_value)
        return 1
    return 1


def _node_macs(node, shapes) -> float | None:
    """Multiply-accumulates of one node, or None if it is not a MAC-carrying layer."""
    from edgesmith.compress.onnx_analysis import node_attr

    op = node.op_type
    if op in _MATMUL_LIKE:
        a_name = node.input[0]
        out = shapes.get(node.output[0])
        if op == "MatMulNBits":
            k = int(node_attr(node, "K"))
            if out is None and a_name in shapes:
                out = shapes[a_name][:-1] + [int(node_attr(node, "N"))]
        elif op == "Gemm":
            a = shapes.get(a_name)
            k = None if a is None else (a[0] if node_attr(node, "transA", 0) else a[-1])
        else:
            b_name = node.input[3] if op == "QLinearMatMul" else node.input[1]
            b = shapes.get(b_name)
            a = shapes.get(a_name)
            k = b[-2] if b is not None and len(b) >= 2 else (a[-1] if a else None)
        if out is None or k is None:
            raise EdgesmithError(
                f"cannot count MACs of {op} node {node.name or node.output[0]!r}: its shapes are unknown.",
                "export with static shapes (except the batch axis) or run onnx shape inference first.")
        return float(np.prod(out, dtype=np.float64)) * float(k)
    if op in _RECURRENT:  # every step: the input and the recurrent weights of every gate, for every direction
        x, w, r = (shapes.get(n) for n in node.input[:3])
        if x is None or w is None or r is None:
            raise EdgesmithError(f"cannot count MACs of {op} node {node.name or node.output[0]!r}: its shapes are "
                                 "unknown.", "export with static shapes (except the batch axis).")
        steps = x[0] * x[1]  # (seq, batch, input), or (batch, seq, input) with layout=1: the product is the same
        return float(steps) * (float(np.prod(w, dtype=np.float64)) + float(np.prod(r, dtype=np.float64)))
    if op in _CONV_LIKE:
        w = shapes.get(node.input[3] if op == "QLinearConv" else node.input[1])
        out = shapes.get(node.output[0])
        if w is None or out is None:
            raise EdgesmithError(
                f"cannot count MACs of {op} node {node.name or node.output[0]!r}: its shapes are unknown.",
                "export with static shapes (except the batch axis) or run onnx shape inference first.")
        return float(np.prod(out, dtype=np.float64)) * float(np.prod(w[1:], dtype=np.float64))
    return None


def _activation_names(graph, consts) -> list[str]:
    """Graph inputs plus every node output computed from run-time data: what flows per call.

    A QDQ pair marks a tensor stored in int8, not two more passes over it: the tensor a node writes only for
    QuantizeLinear to read is written as the int8 output (counted once, at 1 byte), and an activation's
    DequantizeLinear output is read as those int8 codes by the layer it feeds (onnxruntime's QDQ fusion and
    TensorRT run it so), so neither fp32 copy is counted."""
    folded = set(consts)
    readers: dict[str, set[str]] = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, set()).add(node.op_type)
    outputs = {o.name for o in graph.output}
    names = [vi.name for vi in graph.input if vi.name not in consts]
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if inputs and all(i in folded for i in inputs):
            # e.g. DequantizeLinear of an int8 weight: runtimes fold it at load time, not per call
            folded.update(node.output)
            continue
        for o in node.output:
            if not o or o in folded:
                continue
            if o not in outputs and (node.op_type == "DequantizeLinear" or readers.get(o) == {"QuantizeLinear"}):
                continue  # an fp32 copy of an int8 tensor: the int8 one is what moves
            names.append(o)
    return list(dict.fromkeys(names))


# --- torch -----------------------------------------------------------------------------------------


def workload_from_module(module, input_shape) -> Workload:
    """Count MACs of a torch module by one forward pass on a zero sample of ``input_shape``.

    ``input_shape`` excludes the batch axis. Linear and Conv layers (and the export's MatMulLinear)
    carry MACs (a module whose forward uses its weights directly says its own with
    ``workload_counts(input_shape) -> {"macs", "n_layers"}``); every leaf module's output counts as activation bytes; weight bytes are the
    module's parameter and buffer bytes as stored.
    """
    import torch
    from torch import nn

    from edgesmith.compress.export_onnx import MatMulLinear

    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d < 1 for d in shape):
        raise EdgesmithError(f"input_shape {tuple(input_shape)} is not a valid sample shape.",
                             "pass the per-sample shape without the batch axis, e.g. (64,).")
    counts = {"macs": 0.0, "act": 0.0, "layers": 0}

    def hook(mod, inputs, output):
        if not isinstance(output, torch.Tensor):
            return
        counts["act"] += output.numel() * output.element_size()
        if isinstance(mod, nn.Linear):
            counts["macs"] += output.numel() * mod.in_features
            counts["layers"] += 1
        elif isinstance(mod, MatMulLinear):
            counts["macs"] += output.numel() * mod.weight_t.shape[0]
            counts["layers"] += 1
        elif isinstance(mod, nn.modules.conv._ConvNd):
            counts["macs"] += output.numel() * (mod.in_channels // mod.groups) * int(np.prod(mod.kernel_size))
            counts["layers"] += 1

    leaves = [m for m in module.modules() if not list(m.children()) or isinstance(m, MatMulLinear)]
    handles = [m.register_forward_hook(hook) for m in leaves]
    dtype = next((p.dtype for p in module.parameters()), torch.float32)
    x = torch.zeros((1, *shape), dtype=dtype)
    was_training = module.training
    try:
        module.eval()
        with torch.no_grad():
            module(x)
    except Exception as e:  # a shape mismatch surfaces as RuntimeError deep inside torch
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EdgesmithError(f"the module cannot run on a sample shaped {shape}: {first[:200]}",
                             "pass the model's per-sample input shape (without the batch axis).") from None
    finally:
        for h in handles:
            h.remove()
        module.train(was_training)
    weight_bytes = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    precision = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, "fp32")
    if callable(getattr(module, "workload_counts", None)):
        # a module that calls its weights directly (no Linear submodule runs) counts its own work
        own = module.workload_counts(shape)
        return Workload(macs=float(own["macs"]), weight_bytes=float(weight_bytes),
                        activation_bytes=float(counts["act"] + x.numel() * x.element_size()), precision=precision,
                        n_layers=int(own["n_layers"]), batch=1,
                        source=f"{type(module).__name__}.workload_counts (the module's own MAC and layer count)")
    return Workload(macs=float(counts["macs"]), weight_bytes=float(weight_bytes),
                    activation_bytes=float(counts["act"] + x.numel() * x.element_size()),
                    precision=precision, n_layers=int(counts["layers"]), batch=1,
                    source=f"torch forward hooks on {type(module).__name__} ({counts['layers']} Linear/Conv layers)")


# --- Lava ------------------------------------------------------------------------------------------


def workload_from_activity(stats: Mapping, weight_bytes: float) -> Workload:
    """A Loihi workload from Lava run statistics: totals over the run of ``timesteps`` steps.

    ``stats`` must hold ``synops``, ``neuron_updates``, ``messages`` (totals over the run) and
    ``timesteps``; ``weight_bytes`` is the bytes of synaptic weights the network stores. When
    ``stats["per_layer"]`` describes every layer (``neurons``, ``synapses``, ``synops``,
    ``neuron_updates``, ``messages``), the workload carries them so a cost model can place layers on cores.
    """
    missing = [k for k in ACTIVITY_KEYS if k not in stats]
    if missing:
        raise EdgesmithError(f"activity statistics lack {', '.join(missing)}.",
                             f"pass a mapping with all of: {', '.join(ACTIVITY_KEYS)}.")
    values = {}
    for k in ACTIVITY_KEYS:
        try:
            v = float(stats[k])
        except (TypeError, ValueError):
            raise EdgesmithError(f"activity statistic {k} is {stats[k]!r}, not a number.",
                                 "pass numeric counts from the simulator.") from None
        if not np.isfinite(v) or v < 0:
            raise EdgesmithError(f"activity statistic {k} is {v}; counts must be finite and non-negative.",
                                 "check the simulator's counters.")
        values[k] = v
    if values["timesteps"] < 1 or values["timesteps"] != int(values["timesteps"]):
        raise EdgesmithError(f"timesteps is {stats['timesteps']!r}; it must be a positive whole number.",
                             "pass the number of simulated steps.")
    if not np.isfinite(weight_bytes) or weight_bytes < 0:
        raise EdgesmithError(f"weight_bytes is {weight_bytes}; it must be finite and non-negative.",
                             "pass the bytes of synaptic weights the network stores.")
    layers = tuple(_layer_activity(p) for p in stats.get("per_layer") or ()
                   if all(k in p for k in LAYER_KEYS))
    if len(layers) != len(stats.get("per_layer") or ()):
        layers = ()  # a partial description would misplace the rest: fall back to the whole-network model
    return Workload(synops=values["synops"], neuron_updates=values["neuron_updates"],
                    messages=values["messages"], timesteps=int(values["timesteps"]),
                    weight_bytes=float(weight_bytes), precision="fixed", n_layers=len(layers), batch=1,
                    source="Lava run statistics (synops, neuron updates, messages over the run)", layers=layers)


LAYER_KEYS = ("neurons", "synapses", "synops", "neuron_updates", "messages")


def _layer_activity(p: Mapping) -> dict:
    out = {"name": str(p.get("name", "")), "dense_synapses": float(p.get("dense_synapses", p["synapses"]))}
    for k in LAYER_KEYS:
        v = float(p[k])
        if not np.isfinite(v) or v < 0:
            raise EdgesmithError(f"layer {out['name']!r}: activity statistic {k} is {v}.",
                                 "check the simulator's per-layer counters.")
        out[k] = v
    return out


def scale_activity(stats: Mapping, n: float) -> dict:
    """Per-sample activity from run totals over ``n`` samples: every count divided by ``n``, per layer too
    (neuron and synapse counts describe the network and stay)."""
    out = {k: stats[k] / n for k in ACTIVITY_KEYS}
    if stats.get("per_layer"):
        out["per_layer"] = [{**p, **{k: p[k] / n for k in ("synops", "neuron_updates", "messages") if k in p}}
                            for p in stats["per_layer"]]
    return out
