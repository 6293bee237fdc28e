"""ONNX export of the RWKV one-token step, with weight-only low-bit linears for onnxruntime.

Graph: (token int64 (B,), att_x (L,B,C), ffn_x (L,B,C), wkv (L,B,H,N,N)) -> (logits (B,V), new states).
Linears are exported as ``x @ W^T`` (MatMul), then rewritten from the quantized layers' own codes:

- SQ layers (RTN/GPTQ, <= 4 bits) become ``com.microsoft.MatMulNBits`` (4-bit container, our codes,
  fp16-exact scales and integer zero points), so onnxruntime runs its int4 kernel
  (``accuracy_level=4``: int8 activations, the fast CPU path);
- VQ layers become a dequantize-on-the-fly subgraph: Gather(codebooks, indices) -> Reshape ->
  Transpose -> MatMul, the codebooks and indices being the only stored weight data.

The sequence loop stays outside the graph (the decode loop feeds the states back).
"""
from __future__ import annotations

import copy
import hashlib
import io
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import nn

from edgesmith.compress.export_onnx import MatMulLinear
from edgesmith.compress.rwkvquant.tensors import QuantLinear, SQTensor, VQTensor
from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.models.rwkv.base import RWKVState

STATE_NAMES = ("att_x", "ffn_x", "wkv")


class StepModule(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, token, att_x, ffn_x, wkv):
        logits, st = self.model.step(token, RWKVState(att_x, ffn_x, wkv))
        return logits, st.att_x, st.ffn_x, st.wkv


def _key(a: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


def _matmul_copy(model: nn.Module) -> tuple[nn.Module, dict[str, object]]:
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
    group = (np.arange(n_vec) * q.dim) // q.group_cols
    flat_idx = (group[None, :] * k + q.indices.numpy()).astype(np.int64)
    cbs = q.codebooks().numpy().reshape(-1, q.dim).astype(np.float32)
    inits = [numpy_helper.from_array(cbs, prefix + "_codebooks"),
             numpy_helper.from_array(flat_idx.astype(np.int32 if cbs.shape[0] < 2**31 else np.int64), prefix + "_idx"),
             numpy_helper.from_array(np.array([out, n_vec * q.dim], np.int64), prefix + "_shape")]
    nodes = [helper.make_node("Gather", [prefix + "_codebooks", prefix + "_idx"], [prefix + "_vec"], axis=0),
             helper.make_node("Reshape", [prefix + "_vec", prefix + "_shape"], [prefix + "_W"]),
             helper.make_node("Transpose", [prefix + "_W"], [prefix + "_Wt"], perm=[1, 0]),
             helper.make_node("MatMul", [node.input[0], prefix + "_Wt"], list(node.output), name=prefix + "_MatMul")]
    return nodes, inits


def export_step_onnx(model: nn.Module, path: str | os.PathLike, *, accuracy_level: int = 4, opset: int = 17,
                     force: bool = False) -> dict:
    """Write the step graph of ``model`` (fp or quantized) to ``path``; returns counts of rewritten layers."""
    m, quantized = _matmul_copy(model)
    cfg = model.cfg
    state = model.zero_state(1)
    args = (torch.zeros(1, dtype=torch.long), state.att_x, state.ffn_x, state.wkv)
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(StepModule(m), args, buf, input_names=["token", *STATE_NAMES],
                              output_names=["logits", *(f"{n}_out" for n in STATE_NAMES)], opset_version=opset,
                              dynamo=False)
    except Exception as e:  # the exporter raises many types
        raise EdgesmithError(f"ONNX export of the RWKV step failed: {str(e).splitlines()[0][:200]}",
                             "report this model configuration; the step uses only standard ops.") from None
    g = onnx.load_from_string(buf.getvalue())
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
    with atomic_path(Path(path), force=force) as tmp:
        onnx.save(g, str(tmp))
    return {**counts, "config": cfg.to_dict()}


class OrtStepDecoder:
    """Greedy decoding with an exported step graph in onnxruntime."""

    def __init__(self, path: str | os.PathLike, threads: int = 1):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        shapes = {i.name: i.shape for i in self.sess.get_inputs()}
        self.state_shapes = {n: shapes[n] for n in STATE_NAMES}

    def zero_state(self) -> dict:
        return {n: np.zeros(s, np.float32) for n, s in self.state_shapes.items()}

    def step(self, token: int, state: dict):
        out = self.sess.run(None, {"token": np.array([token], np.int64), **state})
        return out[0][0], dict(zip(STATE_NAMES, out[1:]))

    def greedy(self, prompt, n_new: int) -> list[int]:
        state, logits = self.zero_state(), None
        for t in prompt:
            logits, state = self.step(int(t), state)
        out = []
        for _ in range(n_new):
            tok = int(np.argmax(logits))
            out.append(tok)
            logits, state = self.step(tok, state)
        return out


@torch.no_grad()
def torch_greedy(model: nn.Module, prompt, n_new: int) -> list[int]:
    state, logits = model.zero_state(1), None
    for t in prompt:
        logits, state = model.step(torch.tensor([int(t)]), state)
    out = []
    for _ in range(n_new):
        tok = int(logits[0].argmax())
        out.append(tok)
        logits, state = model.step(torch.tensor([tok]), state)
    return out
