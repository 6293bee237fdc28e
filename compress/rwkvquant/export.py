"""Weight-only low-bit linears of an RWKVQuant-quantized model, rewritten inside an exported ONNX graph.

``export-step-onnx`` (``compress/export_step.py``) exports a model's one-step graph with every linear as
``x @ W^T`` (MatMul); for a quantized model, ``rewrite_quantized`` then replaces those MatMuls from the
quantized layers' own codes:

- SQ layers (RTN/GPTQ, <= 4 bits) become ``com.microsoft.MatMulNBits`` (4-bit container, our codes,
  fp16-exact scales and integer zero points), so onnxruntime runs its int4 kernel
  (``accuracy_level=4``: int8 activations, the fast CPU path);
- VQ layers become a dequantize-on-the-fly subgraph: Gather(codebooks, indices) -> Reshape ->
  Transpose -> MatMul, the codebooks and indices being the only stored weight data.
"""
from __future__ import annotations

import copy
import hashlib

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import nn

from edgesmith.compress.export_onnx import MatMulLinear
from edgesmith.compress.rwkvquant.tensors import QuantLinear, SQTensor, VQTensor
from edgesmith.common import EdgesmithError


def _key(a: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


def matmul_copy(model: nn.Module) -> tuple[nn.Module, dict[str, object]]:
    """Copy with every Linear/QuantLinear as MatMulLinear; returns {hash of W^T: quantized tensor or None}."""
    model = copy.deepcopy(model).eval()
    found = {}

    def swap(parent: nn.Module):
        for name, child in parent.named_children():
            if isinstance(child, QuantLinear):
                lin = nn.Linear(child.in_features, child.out_features, bias=False)
                lin.weight.data = child.q.dequantize()
                new = MatMulLinear(lin)
                found[_key(new.weight_t.detach().numpy())] = child.q
                setattr(parent, name, new)
            elif isinstance(child, nn.Linear):
                setattr(parent, name, MatMulLinear(child))
            else:
                swap(child)

    swap(model)
    return model, found


def _pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """(..., 2k) values < 16 -> (..., k) bytes, low nibble first (MatMulNBits layout)."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _matmulnbits(node: onnx.NodeProto, q: SQTensor, prefix: str, accuracy_level: int):
    out, k = q.codes.shape
    bs = q.group_size
    nb = -(-k // bs)
    codes = np.zeros((out, nb * bs), dtype=np.uint8)
    codes[:, :k] = q.codes.numpy()
    packed = _pack_nibbles(codes.reshape(out, nb, bs))
    zeros = q.zeros.numpy().astype(np.uint8)
    if nb % 2:
        zeros = np.concatenate([zeros, np.zeros((out, 1), np.uint8)], axis=1)
    inits = [numpy_helper.from_array(packed, prefix + "_B"),
             numpy_helper.from_array(q.scales.to(torch.float32).numpy().reshape(-1), prefix + "_scales"),
             numpy_helper.from_array(_pack_nibbles(zeros).reshape(-1), prefix + "_zp")]
    new = helper.make_node("MatMulNBits", [node.input[0], prefix + "_B", prefix + "_scales", prefix + "_zp"],
                           list(node.output), name=prefix + "_MatMulNBits", domain="com.microsoft",
                           K=k, N=out, bits=4, block_size=bs, accuracy_level=accuracy_level)
    return [new], inits


def _vq_gather(node: onnx.NodeProto, q: VQTensor, prefix: str):
    out, n_vec = q.indices.shape
    k = q.codebook_codes.shape[1]
    flat_idx = (q.book_of().numpy() * k + q.indices.numpy()).astype(np.int64)
    cbs = q.codebooks().numpy().reshape(-1, q.dim).astype(np.float32)
    inits = [numpy_helper.from_array(cbs, prefix + "_codebooks"),
             numpy_helper.from_array(flat_idx.astype(np.int32 if cbs.shape[0] < 2**31 else np.int64), prefix + "_idx"),
             numpy_helper.from_array(np.array([out, n_vec * q.dim], np.int64), prefix + "_shape")]
    nodes = [helper.make_node("Gather", [prefix + "_codebooks", prefix + "_idx"], [prefix + "_vec"], axis=0),
             helper.make_node("Reshape", [prefix + "_vec", prefix + "_shape"], [prefix + "_W"]),
             helper.make_node("Transpose", [prefix + "_W"], [prefix + "_Wt"], perm=[1, 0]),
             helper.make_node("MatMul", [node.input[0], prefix + "_Wt"], list(node.output), name=prefix + "_MatMul")]
    return nodes, inits


def rewrite_quantized(g: onnx.ModelProto, quantized: dict, accuracy_level: int) -> dict:
    """Replace the MatMuls whose weights came from quantized layers (see ``matmul_copy``); returns counts."""
    inits = {t.name: t for t in g.graph.initializer}
    counts = {"matmulnbits": 0, "vq_gather": 0, "fp32_matmul": 0}
    new_nodes, drop = [], set()
    for i, node in enumerate(g.graph.node):
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        q = quantized.get(_key(numpy_helper.to_array(w))) if w is not None and len(w.dims) == 2 else None
        if q is None:
            if w is not None:
                counts["fp32_matmul"] += 1
            new_nodes.append(node)
            continue
        prefix = f"q{i}"
        if isinstance(q, SQTensor) and q.bits <= 4 and q.group_size >= 16 and not q.group_size & (q.group_size - 1):
            nodes, extra = _matmulnbits(node, q, prefix, accuracy_level)
            counts["matmulnbits"] += 1
        else:
            if isinstance(q, SQTensor):
                raise EdgesmithError(f"an SQ layer with {q.bits} bits / group {q.group_size} has no MatMulNBits form.",
                                     "use at most 4 bits and a power-of-two group of at least 16.")
            nodes, extra = _vq_gather(node, q, prefix)
            counts["vq_gather"] += 1
        new_nodes += nodes
        g.graph.initializer.extend(extra)
        drop.add(node.input[1])
    del g.graph.node[:]
    g.graph.node.extend(new_nodes)
    used = {x for n in g.graph.node for x in n.input}
    keep = [t for t in g.graph.initializer if t.name in used or t.name not in drop]
    del g.graph.initializer[:]
    g.graph.initializer.extend(keep)
    if counts["matmulnbits"]:
        g.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return counts
