"""Weight-only low-bit linears of an RWKVQuant-quantized model, rewritten inside an exported ONNX graph.

``export-step-onnx`` (``compress/export_step.py``) exports a model's one-step graph with every linear as
``x @ W^T`` (MatMul); for a quantized model, ``rewrite_quantized`` then replaces those MatMuls from the
quantized layers' own codes:

- SQ layers (RTN/GPTQ, <= 4 bits) become ``com.microsoft.MatMulNBits`` (4-bit container, our codes,
  fp16-exact scales and integer zero points), so onnxruntime runs its int4 kernel
  (``accuracy_level=4``: int8 activations, the fast CPU path);
- VQ layers become, by default (``vq_form="gather"``), a dequantize-on-the-fly subgraph: Gather(codebooks,
  indices) -> Reshape -> Transpose -> MatMul, the codebooks and indices being the only stored weight data
  (the smallest file; onnxruntime folds it to an fp32 weight when it loads the graph). ``vq_form="int8"``
  writes them instead as an 8-bit MatMulNBits, exactly: every dequantized weight is an 8-bit codebook code
  times its codebook's scale plus its offset, so the codes go in as 8-bit weights with the scale of the
  codebook each block of the row lies in, and the offsets come back as (sum of x over each block) @ offsets.
  A bigger file (8 bits per weight) but 8 bits in memory at run time instead of 32, and the int8 kernel.
  With blockwise normalisation the gather form multiplies the gathered weight by the per-weight scales
  (Gather of the (rows, blocks) scale table along the columns), and the int8 form folds each (row, block)
  scale into that block's MatMulNBits scale and offset (its blocks then lie inside one scale block).
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
from edgesmith.compress.rwkvquant.tensors import (QuantLinear, SQTensor, VQTensor, dequantize_log_scales,
                                                  scale_block_index)
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
    # a symmetric grid (zero point 2^(b-1)) is re-centred on 8, MatMulNBits' default zero point, and stored without
    # zero points: the same weights ((q + 8 - 2^(b-1)) - 8 = q - 2^(b-1)), and the CPU kernel is faster without them
    symmetric = q.symmetric
    codes[:, :k] = q.codes.numpy() + (8 - 2 ** (q.bits - 1) if symmetric else 0)
    packed = _pack_nibbles(codes.reshape(out, nb, bs))
    inits = [numpy_helper.from_array(packed, prefix + "_B"),
             numpy_helper.from_array(q.scales.to(torch.float32).numpy().reshape(-1), prefix + "_scales")]
    if not symmetric:
        zeros = q.zeros.numpy().astype(np.uint8)
        if nb % 2:
            zeros = np.concatenate([zeros, np.zeros((out, 1), np.uint8)], axis=1)
        inits.append(numpy_helper.from_array(_pack_nibbles(zeros).reshape(-1), prefix + "_zp"))
    new = helper.make_node("MatMulNBits", [node.input[0]] + [t.name for t in inits],
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
             helper.make_node("Reshape", [prefix + "_vec", prefix + "_shape"], [prefix + "_W"])]
    w = prefix + "_W"
    if q.scale_codes is not None:
        table = dequantize_log_scales(q.scale_codes, q.scale_lo, q.scale_step).numpy().astype(np.float32)
        block = scale_block_index(n_vec * q.dim, q.group_cols, q.scale_block).numpy()
        inits += [numpy_helper.from_array(table, prefix + "_stable"),
                  numpy_helper.from_array(block.astype(np.int32), prefix + "_sblock")]
        nodes += [helper.make_node("Gather", [prefix + "_stable", prefix + "_sblock"], [prefix + "_S"], axis=1),
                  helper.make_node("Mul", [w, prefix + "_S"], [prefix + "_WS"])]
        w = prefix + "_WS"
    nodes += [helper.make_node("Transpose", [w], [prefix + "_Wt"], perm=[1, 0]),
             helper.make_node("MatMul", [node.input[0], prefix + "_Wt"], list(node.output), name=prefix + "_MatMul")]
    return nodes, inits


def vq_block(q: VQTensor, sizes: tuple[int, ...] = (64, 32, 16, 128, 256)) -> int | None:
    """The first of ``sizes`` (powers of two, each a multiple of the vector length) that can be a block of the
    VQ layer's 8-bit form: inside one codebook's columns and one normalisation scale block; None when none is."""
    for bs in sizes:
        if (q.group_cols % bs == 0 and bs % q.dim == 0 and q.indices.shape[1] * q.dim % bs == 0
                and (q.scale_codes is None or q.scale_block % bs == 0)):
            return bs
    return None


def vq_int8(q: VQTensor, bs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A VQ layer exactly as 8-bit codes: (out, in) uint8 codes and, per row and block of ``bs`` inputs, a scale
    and an offset with w = code * scale + offset (the codebook's, times the block's normalisation scale)."""
    out, n_vec = q.indices.shape
    k = n_vec * q.dim
    nb = k // bs
    books = q.book_of()
    codes = q.codebook_codes[books, q.indices].reshape(out, k).numpy().astype(np.uint8)
    book = books[:, (np.arange(nb) * bs) // q.dim]  # (out, nb): the codebook of each block
    scales = q.codebook_scale.to(torch.float32)[book].numpy()
    offsets = q.codebook_offset.to(torch.float32)[book].numpy()
    if q.scale_codes is not None:  # w = (code * cs + lo) * s: the block's scale s folds into both
        s = q.scales()[:, np.arange(nb) * bs].numpy()
        scales, offsets = scales * s, offsets * s
    return codes, scales, offsets


def _vq_matmulnbits8(node: onnx.NodeProto, q: VQTensor, prefix: str, accuracy_level: int, bs: int):
    codes, scales, offsets = vq_int8(q, bs)
    out, k = codes.shape
    nb = k // bs
    inits = [numpy_helper.from_array(codes.reshape(out, nb, bs), prefix + "_B"),
             numpy_helper.from_array(scales.reshape(-1), prefix + "_scales"),
             numpy_helper.from_array(np.zeros(out * nb, np.uint8), prefix + "_zp"),
             numpy_helper.from_array(np.ascontiguousarray(offsets.T), prefix + "_offsets"),
             numpy_helper.from_array(np.array([-1, bs], np.int64), prefix + "_blocks"),
             numpy_helper.from_array(np.array([-1, nb], np.int64), prefix + "_rows"),
             numpy_helper.from_array(np.array([1], np.int64), prefix + "_axis")]
    x, y = node.input[0], node.output[0]
    nodes = [helper.make_node("MatMulNBits", [x, prefix + "_B", prefix + "_scales", prefix + "_zp"], [prefix + "_mm"],
                              name=prefix + "_MatMulNBits", domain="com.microsoft", K=k, N=out, bits=8,
                              block_size=bs, accuracy_level=accuracy_level),
             helper.make_node("Reshape", [x, prefix + "_blocks"], [prefix + "_xb"]),
             helper.make_node("ReduceSum", [prefix + "_xb", prefix + "_axis"], [prefix + "_xs"], keepdims=0),
             helper.make_node("Reshape", [prefix + "_xs", prefix + "_rows"], [prefix + "_xsum"]),
             helper.make_node("MatMul", [prefix + "_xsum", prefix + "_offsets"], [prefix + "_off"]),
             helper.make_node("Shape", [prefix + "_mm"], [prefix + "_shape"]),
             helper.make_node("Reshape", [prefix + "_off", prefix + "_shape"], [prefix + "_offr"]),
             helper.make_node("Add", [prefix + "_mm", prefix + "_offr"], [y])]
    return nodes, inits


VQ_FORMS = ("gather", "int8")


def rewrite_quantized(g: onnx.ModelProto, quantized: dict, accuracy_level: int, vq_form: str = "gather") -> dict:
    """Replace the MatMuls whose weights came from quantized layers (see ``matmul_copy``); returns counts."""
    inits = {t.name: t for t in g.graph.initializer}
    counts = {"matmulnbits": 0, "vq_gather": 0, "vq_int8": 0, "fp32_matmul": 0}
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
            bs = vq_block(q) if vq_form == "int8" else None
            if bs is not None:
                nodes, extra = _vq_matmulnbits8(node, q, prefix, accuracy_level, bs)
                counts["vq_int8"] += 1
            else:
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
    if counts["matmulnbits"] or counts["vq_int8"]:
        g.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return counts
