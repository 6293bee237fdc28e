"""Lower brevitas QCDQ Gemms to onnxruntime's integer ``MatMulIntegerToFloat`` kernel.

brevitas exports a quantized Linear as ``DequantizeLinear(q_x) -> Gemm(transB=1) <- DequantizeLinear(Clip(W_int))``
with a float bias. onnxruntime's QDQ fusion only turns a Gemm into an integer ``QGemm`` when *every* input,
the bias included, comes from a DequantizeLinear (an int32 bias at scale s_x * s_w), and a ReLU between the
Gemm and the next QuantizeLinear blocks it unless the ReLU is redundant with that Q. So brevitas's graphs run
in fp32 with every weight dequantized again on each call (ten times slower than fp32 on digits-wide).

This lowering rewrites each such group into one ``com.microsoft.MatMulIntegerToFloat`` over unsigned 8-bit
operands: the activation quantized again by a QuantizeLinear whose zero point is 128 higher (uint8 q + 128 is
the int8 q exactly: same rounding, same saturation; brevitas's narrower-range Clip moved by 128 too) and the
clipped integer weights + 128, transposed to [K, N], zero point 128. Unsigned x unsigned because on AVX2
without VNNI the u8 x s8 kernel multiplies pairs into saturating 16-bit sums (vpmaddubsw), which 8-bit
weights overflow (onnxruntime's own quantizer shrinks weights to 7 bits there); the s8 x s8 path is slow.
The kernel computes what the QCDQ graph means, s_x * s_w[n] * sum_k (q_x - z_x)(w - z_w) + b, with the sum
exact in int32 rather than in fp32 after dequantization, so outputs agree to float rounding (and to a flipped
rounding at the next quantizer where a value sits on its edge). Conv layers stay in QCDQ form (onnxruntime's
integer convolution needs an int32 bias and a Q right after the Conv). The lowered file needs onnxruntime (a
contrib op); the plain QCDQ file stays the portable form (TensorRT, TVM).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgesmith.compress.onnx_analysis import constant_arrays, node_attr

MS_DOMAIN = "com.microsoft"


def _clip_bounds(node: onnx.NodeProto, consts: dict) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A Clip node's constant (min, max); None for a bound it does not give or that is not constant."""
    return tuple(consts.get(node.input[i]) if len(node.input) > i and node.input[i] else None for i in (1, 2))


def _int_weight(name: str, consts: dict, producers: dict) -> np.ndarray | None:
    """The integer weight tensor behind ``name``: a constant, or a Clip of one (brevitas's narrow-range clip)."""
    if name in consts:
        return consts[name]
    node = producers.get(name)
    if node is None or node.op_type != "Clip" or node.input[0] not in consts:
        return None
    lo, hi = _clip_bounds(node, consts)
    w = consts[node.input[0]]
    return np.clip(w, lo if lo is not None else w.min(), hi if hi is not None else w.max()).astype(w.dtype)


def _u8(values: np.ndarray) -> np.ndarray:
    """int8 -> uint8 by adding 128 (uint8 passes through)."""
    return values if values.dtype == np.uint8 else (values.astype(np.int16) + 128).astype(np.uint8)


def _activation_chain(dq_a: onnx.NodeProto, consts: dict, producers: dict):
    """(float input, scale name, zero point, clip bounds or None) of the Q [-> Clip] feeding ``dq_a``; or None."""
    node = producers.get(dq_a.input[0])
    clip = None
    if node is not None and node.op_type == "Clip":
        lo, hi = _clip_bounds(node, consts)
        if lo is None or hi is None:
            return None
        clip, node = (lo, hi), producers.get(node.input[0])
    if node is None or node.op_type != "QuantizeLinear" or len(node.input) < 3:
        return None
    zp = consts.get(node.input[2])
    if zp is None or zp.size != 1 or zp.dtype not in (np.int8, np.uint8) or node.input[1] != dq_a.input[1] \
            or consts.get(dq_a.input[2]) is None or not np.array_equal(consts[dq_a.input[2]], zp):
        return None
    return node.input[0], node.input[1], zp, clip


def lower_gemms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Replace every QCDQ Gemm with MatMulIntegerToFloat; returns the new model and how many were lowered."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    consts = constant_arrays(g)
    producers = {o: n for n in g.node for o in n.output}
    users: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    replaced: dict[int, list[onnx.NodeProto]] = {}
    new_inits = []
    for idx, gemm in enumerate(g.node):
        if gemm.op_type != "Gemm" or node_attr(gemm, "transA", 0) or node_attr(gemm, "alpha", 1.0) != 1.0 \
                or node_attr(gemm, "beta", 1.0) != 1.0:
            continue
        dq_a, dq_w = producers.get(gemm.input[0]), producers.get(gemm.input[1])
        if dq_a is None or dq_w is None or dq_a.op_type != "DequantizeLinear" or dq_w.op_type != "DequantizeLinear":
            continue
        chain = _activation_chain(dq_a, consts, producers) if len(dq_a.input) >= 3 else None
        if chain is None or users.get(dq_w.output[0], 0) != 1 or len(dq_w.input) < 3:
            continue
        w = _int_weight(dq_w.input[0], consts, producers)
        w_scale, w_zp = consts.get(dq_w.input[1]), consts.get(dq_w.input[2])
        if w is None or w.ndim != 2 or w.dtype not in (np.int8, np.uint8) or w_scale is None or w_zp is None:
            continue
        trans_b = node_attr(gemm, "transB", 0)
        n_out = w.shape[0] if trans_b else w.shape[1]
        axis = node_attr(dq_w, "axis", 1)
        per_out = w_scale.size == n_out and (axis == 0 if trans_b else axis == 1)
        if not (w_scale.size == 1 or per_out) or w_zp.size != w_scale.size or w_zp.dtype != w.dtype:
            continue
        if len(gemm.input) > 2 and gemm.input[2]:
            bias = consts.get(gemm.input[2])
            if bias is None or bias.size != n_out:  # a broadcast [M, N] bias has no per-column form here
                continue
        x, a_scale, a_zp, clip = chain
        base = gemm.name or gemm.output[0]
        names = {k: f"{base}/{k}" for k in ("int_w", "w_scale", "w_zp", "a_zp", "a_lo", "a_hi", "qx", "qx_clipped")}
        new_inits += [numpy_helper.from_array(np.ascontiguousarray(_u8(w.T if trans_b else w)), names["int_w"]),
                      numpy_helper.from_array(w_scale.reshape(-1).astype(np.float32), names["w_scale"]),
                      numpy_helper.from_array(_u8(w_zp.reshape(-1)), names["w_zp"]),
                      numpy_helper.from_array(_u8(a_zp.reshape(())), names["a_zp"])]
        nodes = [helper.make_node("QuantizeLinear", [x, a_scale, names["a_zp"]], [names["qx"]], name=f"{base}/quantize_u8")]
        qx = names["qx"]
        if clip is not None:
            new_inits += [numpy_helper.from_array(_u8(clip[0].reshape(())), names["a_lo"]),
                          numpy_helper.from_array(_u8(clip[1].reshape(())), names["a_hi"])]
            nodes.append(helper.make_node("Clip", [qx, names["a_lo"], names["a_hi"]], [names["qx_clipped"]],
                                          name=f"{base}/clip_u8"))
            qx = names["qx_clipped"]
        inputs = [qx, names["int_w"], a_scale, names["w_scale"], names["a_zp"], names["w_zp"]]
        if len(gemm.input) > 2 and gemm.input[2]:
            inputs.append(gemm.input[2])
        nodes.append(helper.make_node("MatMulIntegerToFloat", inputs, list(gemm.output), name=f"{base}/integer",
                                      domain=MS_DOMAIN))
        replaced[idx] = nodes
    if not replaced:
        return model, 0
    nodes = [m for i, n in enumerate(g.node) for m in replaced.get(i, [n])]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    _drop_dead(model)
    if not any(op.domain == MS_DOMAIN for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return model, len(replaced)


def _drop_dead(model: onnx.ModelProto) -> None:
    """Remove nodes and initializers nothing reads any more (the old weight DQ/Clip/Constant chains)."""
    g = model.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in g.node for a in n.attribute):
        return  # subgraphs read outer names implicitly: keep every node rather than trace them
    live = {o.name for o in g.output}
    keep = []
    for n in reversed(list(g.node)):
        if any(o in live for o in n.output):
            keep.append(n)
            live.update(i for i in n.input if i)
    del g.node[:]
    g.node.extend(reversed(keep))
    inits = [i for i in g.initializer if i.name in live]
    del g.initializer[:]
    g.initializer.extend(inits)
