"""``import-onnx-mlp``: a user's ONNX graph that is a chain of dense or convolutional layers with ReLU, as a
torch MLP.

The Sigma-Delta export (``export-netx``) maps Linear and ReLU layers to Loihi 2 neurons; this pass lets an
ONNX model take that road. The graph must be one data path from its input to its output through
``Flatten`` / flattening ``Reshape`` / ``Identity``, ``Gemm``, ``MatMul`` or ``Conv`` with a constant weight
(optionally followed by an ``Add`` of a constant bias) and ``Relu``. A ``Conv`` (1-D or 2-D, symmetric
padding, input sizes fixed in the graph) is lowered to its sparse matrix (``compress/lowering.py``), so it
becomes a dense layer whose zero synapses Lava does not store. Anything else is refused, naming the first
operator and node that does not map (``check_onnx_mlp``, also used by targets before any work starts).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass

PASS_THROUGH = ("Flatten", "Identity", "Reshape")


def _refuse(node, why: str) -> EdgesmithError:
    return EdgesmithError(f"operator {node.op_type} (node {node.name or node.output[0]!r}) does not map to a "
                          f"Sigma-Delta network: {why}.",
                          "only chains of dense or convolutional layers (Gemm, MatMul, Conv, + Add) with ReLU map; "
                          "deploy this model to "
                          "host-cpu or jetson-orin-nano.")


def onnx_mlp_layers(model) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """[(weight (out, in), bias (out,), relu after)] of a dense ReLU chain, or an error naming the first
    operator that is not one."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    data = [i.name for i in g.input if i.name not in inits]
    if len(data) != 1 or len(g.output) != 1:
        raise EdgesmithError(f"the model has {len(data)} inputs and {len(g.output)} outputs; a Sigma-Delta network "
                             "takes one input and gives one output.", "deploy this model to host-cpu or jetson-orin-nano.")
    consumers: dict[str, list] = {}
    for n in g.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    shape = _input_shape(g, data[0])
    current, layers, end = data[0], [], g.output[0].name
    while current != end:
        users = consumers.get(current, [])
        if len(users) != 1:
            raise EdgesmithError(f"tensor {current!r} feeds {len(users)} nodes; a Sigma-Delta network is one chain of "
                                 "layers.", "deploy this model to host-cpu or jetson-orin-nano.")
        node = users[0]
        attrs = {a.name: a for a in node.attribute}
        if node.op_type in PASS_THROUGH:
            if node.op_type == "Reshape":
                target = inits.get(node.input[1])
                if target is None or target.ndim != 1 or len(target) != 2 or target[1] != -1:
                    raise _refuse(node, "only a flatten to (batch, -1) passes through")
            if node.op_type != "Identity" and shape is not None:
                shape = (int(np.prod(shape)),)
        elif node.op_type == "Conv":
            from edgesmith.compress.lowering import conv_matrix

            w = inits.get(node.input[1])
            b = inits.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            if w is None or w.ndim not in (3, 4):
                raise _refuse(node, "its weight is not a constant 1-D or 2-D kernel")
            dims = w.ndim - 2
            if shape is None or len(shape) != dims + 1:
                raise _refuse(node, "its input's channel and spatial sizes are not fixed in the graph")
            pad_mode = attrs["auto_pad"].s.decode() if "auto_pad" in attrs else "NOTSET"
            pads = list(attrs["pads"].ints) if "pads" in attrs else [0] * (2 * dims)
            if pad_mode not in ("NOTSET", "VALID") or pads[:dims] != pads[dims:]:
                raise _refuse(node, "only symmetric explicit padding maps")
            ints = {k: list(attrs[k].ints) for k in ("strides", "dilations") if k in attrs}
            m, bias, shape = conv_matrix(w, b, shape, ints.get("strides", 1), pads[:dims] if pad_mode == "NOTSET" else 0,
                                         ints.get("dilations", 1), attrs["group"].i if "group" in attrs else 1)
            layers.append([m, bias, False])
        elif node.op_type == "Gemm":
            w, b = inits.get(node.input[1]), inits.get(node.input[2]) if len(node.input) > 2 else None
            alpha = attrs["alpha"].f if "alpha" in attrs else 1.0
            beta = attrs["beta"].f if "beta" in attrs else 1.0
            if w is None or attrs.get("transA") and attrs["transA"].i:
                raise _refuse(node, "its weight is not a constant, or its input is transposed")
            w = w if attrs.get("transB") and attrs["transB"].i else w.T
            bias = np.zeros(w.shape[0]) if b is None else np.broadcast_to(b, (w.shape[0],)) * beta
            layers.append([np.asarray(w * alpha, np.float64), np.asarray(bias, np.float64), False])
            shape = (w.shape[0],)
        elif node.op_type == "MatMul":
            w = inits.get(node.input[1])
            if w is None or w.ndim != 2:
                raise _refuse(node, "its weight is not a constant 2-D matrix")
            layers.append([np.asarray(w.T, np.float64), np.zeros(w.shape[1]), False])
            shape = (w.shape[1],)
        elif node.op_type == "Add":
            other = node.input[1] if node.input[0] == current else node.input[0]
            b = inits.get(other)
            if not layers or b is None or layers[-1][2]:
                raise _refuse(node, "only a constant bias right after a dense layer maps")
            bb = np.asarray(b, np.float64)
            while shape is not None and bb.ndim > len(shape) and bb.shape[0] == 1:
                bb = bb[0]  # a leading batch axis of 1
            try:  # a per-channel bias (C, 1, 1) after a convolution broadcasts over its positions
                full = np.broadcast_to(bb, shape).reshape(-1) if shape is not None and bb.ndim > 1 else \
                    np.broadcast_to(bb.reshape(-1), layers[-1][1].shape)
            except ValueError:
                raise _refuse(node, f"its bias of shape {list(np.shape(b))} does not broadcast to the layer") from None
            layers[-1][1] = layers[-1][1] + full
        elif node.op_type == "Relu":
            if not layers or layers[-1][2]:
                raise _refuse(node, "a ReLU must follow a dense layer")
            layers[-1][2] = True
        else:
            raise _refuse(node, "not a dense layer, ReLU or flatten")
        current = node.output[0]
    if not layers:
        raise EdgesmithError("the model has no dense layer to map.", "deploy this model to host-cpu.")
    return [(w, b, relu) for w, b, relu in layers]


def _input_shape(g, name: str) -> tuple | None:
    """The data input's per-sample shape when every dimension after the batch is a fixed number."""
    for i in g.input:
        if i.name == name:
            dims = i.type.tensor_type.shape.dim[1:]
            if dims and all(d.HasField("dim_value") for d in dims):
                return tuple(int(d.dim_value) for d in dims)
    return None


def check_onnx_mlp(path) -> None:
    import onnx

    onnx_mlp_layers(onnx.load(str(path)))


@dataclass
class ImportOnnxMlpConfig(PassConfig):
    """ONNX dense-ReLU chain -> torch ``nn.Sequential`` of Flatten, Linear and ReLU (for export-netx)."""

    kind: ClassVar[str] = "import-onnx-mlp"
    input_format: ClassVar[str] = "onnx"
    output_format: ClassVar[str] = "torch"


@register_pass(ImportOnnxMlpConfig)
def _import_onnx_mlp(artifact: Artifact, config: ImportOnnxMlpConfig, ctx: PassContext) -> PassResult:
    import onnx
    import torch
    from torch import nn

    layers = onnx_mlp_layers(onnx.load(str(artifact.path)))
    mods: list[nn.Module] = [nn.Flatten()]
    for w, b, relu in layers:
        lin = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.astype(np.float32)))
            lin.bias.copy_(torch.from_numpy(b.astype(np.float32)))
        mods.append(lin)
        if relu:
            mods.append(nn.ReLU())
    module = nn.Sequential(*mods).eval()
    new = Artifact("torch", module=module, meta={k: v for k, v in artifact.meta.items() if k != "inputs"})
    report = PassReport(config.to_dict(), "onnx", "torch", artifact.size_bytes(), new.size_bytes(),
                        notes=[f"{len(layers)} dense layer(s), {sum(r for *_, r in layers)} with ReLU"])
    return PassResult(new, report)
