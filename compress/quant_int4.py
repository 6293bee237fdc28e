"""4-bit weight-only quantization of an ONNX model's MatMul weights (onnxruntime MatMulNBits).

Each MatMul with a constant [K, N] weight becomes a ``com.microsoft.MatMulNBits`` node holding the
weight in blocks of ``block_size`` values along K: packed 4-bit codes, one fp32 scale per block
and, when asymmetric, one 4-bit zero point per block. Activations stay fp32 in the graph; with
``accuracy_level=4`` onnxruntime's kernel quantizes them to int8 on the fly, which is what makes it
faster than fp32. A Gemm with a constant 2-D weight (a Linear layer exported from torch, a classifier
head) is first rewritten as the MatMul + Add it computes (``gemm_as_matmul``, on by default; the MatMul keeps
the Gemm's name), so it is quantized too. Conv, other Gemms and MatMuls whose weight is computed at run time
are left as they are and reported as skipped, with the reason.

Bits per weight (per layer and for the pass): over the quantized MatMul weights only, the bits of
the packed code bytes (the last block of each column padded to ``block_size``) + one fp32 scale
per block + (asymmetric only) the packed 4-bit zero points, divided by K x N. Symmetric blocks of
32 give exactly ``4 + 32/32 = 5`` bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
from onnx import numpy_helper

from edgesmith.compress.base import first_samples, Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.compress.quant_int8 import refuse_quantized
from edgesmith.compress.onnx_analysis import (
    WeightLayer,
    bits_per_weight,
    check_node_names,
    find_weight_layers,
    graphs_with_scope,
    initializers,
    layer_data_inputs,
    load_model,
    node_attr,
    output_sqnr,
    quiet_onnxruntime,
    report_db,
    restore_order,
    sqnr_db,
    tensor_bits,
)
from edgesmith.compress.sensitivity import sensitivity_requested, sensitivity_table
from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.common.checks import is_int

ACCURACY_LEVELS = (0, 1, 2, 3, 4)  # 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8 compute


@dataclass
class Int4WeightOnlyConfig(PassConfig):
    """Blockwise 4-bit weights for MatMul nodes.

    ``block_size``: weights per scale along K (a power of two, at least 16). ``symmetric``: no zero
    points (codes centred on 8). ``accuracy_level``: onnxruntime's compute type for MatMulNBits
    (4 = int8 activations, the fast path). ``exclude``: MatMul node names kept in fp32.
    ``n_calibration``: samples (from the calibration data, if any) for the per-layer output error.
    ``gemm_as_matmul``: rewrite each Gemm with a constant 2-D weight as MatMul (+ Add for its bias) first.
    """

    kind: ClassVar[str] = "int4-weight-only"
    input_format: ClassVar[str] = "onnx"
    output_format: ClassVar[str] = "onnx"

    block_size: int = 32
    symmetric: bool = True
    accuracy_level: int = 4
    exclude: tuple[str, ...] = ()
    n_calibration: int = 128
    allow_empty: bool = False  # accept a result with no layer quantized (otherwise that is an error)
    gemm_as_matmul: bool = True

    def validate(self) -> None:
        bs = self.block_size
        if not is_int(bs, 16) or bs & (bs - 1):
            self._fail("block_size", f"is {bs!r}", "use a power of two of at least 16 (32, 64, 128, ...).")
        if not isinstance(self.symmetric, bool):
            self._fail("symmetric", f"is {self.symmetric!r}", "use true or false.")
        if isinstance(self.accuracy_level, bool) or self.accuracy_level not in ACCURACY_LEVELS:
            self._fail("accuracy_level", f"is {self.accuracy_level!r}",
                       "use 4 (int8 compute, fastest on CPU) or 0-3 (unset, fp32, fp16, bf16).")
        if isinstance(self.exclude, str) or not all(isinstance(n, str) for n in self.exclude):
            self._fail("exclude", f"is {self.exclude!r}", "give a list of node names, e.g. [\"/0/MatMul\"].")
        self.exclude = tuple(self.exclude)
        for name in ("allow_empty", "gemm_as_matmul"):
            if not isinstance(getattr(self, name), bool):
                self._fail(name, f"is {getattr(self, name)!r}", "use true or false.")
        if not is_int(self.n_calibration, 1):
            self._fail("n_calibration", f"is {self.n_calibration!r}", "use a whole number of samples, at least 1.")


def _gemm_bias(node: onnx.NodeProto) -> str | None:
    return node.input[2] if len(node.input) > 2 and node.input[2] else None


def _gemm_rewritable(node: onnx.NodeProto, inits: dict) -> bool:
    """A Gemm that ``gemms_as_matmul`` rewrites: constant 2-D weight, A not transposed, bias constant or beta 1."""
    if node.op_type != "Gemm" or len(node.input) < 2 or node.input[1] not in inits:
        return False
    bias = _gemm_bias(node)
    return len(inits[node.input[1]].dims) == 2 and not node_attr(node, "transA", 0) and \
        not (bias and bias not in inits and float(node_attr(node, "beta", 1.0)) != 1.0)


def int4_layer_counts(model: onnx.ModelProto) -> dict[str, int]:
    """What MatMulNBits can quantize: {"matmul": MatMuls with a constant 2-D weight, in the main graph or an If/Loop/Scan
    body (onnxruntime's quantizer walks those too), "gemm": main-graph Gemms that ``gemms_as_matmul`` rewrites}. Reads
    initializer dims only, so external weight data need not be loaded."""
    counts = {"matmul": 0, "gemm": 0}
    for graph, where, inits in graphs_with_scope(model):
        for n in graph.node:
            if n.op_type == "MatMul" and len(n.input) == 2 and n.input[1] in inits and len(inits[n.input[1]].dims) == 2:
                counts["matmul"] += 1
            elif not where and _gemm_rewritable(n, inits):
                counts["gemm"] += 1
    return counts


def gemms_as_matmul(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with every top-level Gemm that has a constant 2-D weight and no transposed input A
    rewritten as ``MatMul(A, alpha * B')`` (named as the Gemm) followed, if it has a bias C, by ``Add(., beta * C)``
    with C constant or beta 1; and the names of the Gemms rewritten. The same values up to float rounding."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = initializers(m)
    taken = {t.name for t in m.graph.initializer} | {o for n in m.graph.node for o in n.output} \
        | {i.name for i in m.graph.input}

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    nodes, done = [], []
    for node in m.graph.node:
        if not _gemm_rewritable(node, inits):
            nodes.append(node)
            continue
        bias, beta = _gemm_bias(node), float(node_attr(node, "beta", 1.0))
        b = numpy_helper.to_array(inits[node.input[1]])
        b = (b.T if node_attr(node, "transB", 0) else b) * np.asarray(node_attr(node, "alpha", 1.0), b.dtype)
        wname = fresh(f"{node.input[1]}_as_matmul")
        m.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(b), wname))
        out = fresh(f"{node.output[0]}_matmul") if bias else node.output[0]
        nodes.append(onnx.helper.make_node("MatMul", [node.input[0], wname], [out], name=node.name))
        if bias:
            if beta != 1.0:
                c = numpy_helper.to_array(inits[bias])
                bias_name = fresh(f"{bias}_scaled")
                m.graph.initializer.append(numpy_helper.from_array(c * np.asarray(beta, c.dtype), bias_name))
                bias = bias_name
            nodes.append(onnx.helper.make_node("Add", [out, bias], [node.output[0]], name=fresh(f"{node.name}/bias")))
        done.append(node.name)
    if done:
        del m.graph.node[:]
        m.graph.node.extend(nodes)
        used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
        kept = [t for t in m.graph.initializer if t.name in used]  # the Gemms' own weights, if nothing else reads them
        del m.graph.initializer[:]
        m.graph.initializer.extend(kept)
        stale = {i.name for i in m.graph.input} & (set(inits) - used)  # initializers listed as inputs (old exporters)
        keep_inputs = [i for i in m.graph.input if i.name not in stale]
        del m.graph.input[:]
        m.graph.input.extend(keep_inputs)
    return m, done


def quantize_int4(model: onnx.ModelProto, config: Int4WeightOnlyConfig,
                  only: list[str] | None = None) -> onnx.ModelProto:
    """A MatMulNBits copy of ``model`` (the input is not modified); ``only`` limits it to those nodes.

    ``only`` becomes an exclude list of every other node: onnxruntime's own ``nodes_to_include``
    adds nodes to the MatMul op type instead of restricting to them.
    """
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    m = onnx.ModelProto()
    m.CopyFrom(model)
    exclude = set(config.exclude)
    if only is not None:
        exclude |= {n.name for graph, _, _ in graphs_with_scope(m) for n in graph.node if n.name not in only}
    try:
        with quiet_onnxruntime():
            q = MatMulNBitsQuantizer(m, block_size=config.block_size, is_symmetric=config.symmetric,
                                     accuracy_level=config.accuracy_level, nodes_to_exclude=sorted(exclude))
            q.process()
    except Exception as e:  # onnxruntime raises assorted types; all mean "cannot rewrite this model"
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EdgesmithError(f"onnxruntime could not quantize the model to int4: {msg[:300]}",
                             "exclude the failing MatMul node(s) with `exclude`, or re-export the model.") from None
    return q.model.model


def _unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """uint8 bytes -> 4-bit codes along the last axis, low nibble first (MatMulNBits' layout)."""
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    return out


def dequantize_matmulnbits(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> tuple[np.ndarray, int]:
    """The [K, N] weight a 4-bit MatMulNBits node computes with, and the bits it is stored in.

    Stored bits: the packed code bytes (padding of the last block included) + the scales + the
    packed zero points when present. Without zero points the codes are centred on 8.
    """
    attrs = {a.name: a.i for a in node.attribute}
    k, n, block, bits = attrs["K"], attrs["N"], attrs["block_size"], attrs.get("bits", 4)
    if bits != 4:
        raise ValueError(f"{node.name}: only 4-bit MatMulNBits is supported here, not {bits}-bit")
    stored = [inits[name] for name in node.input[1:4] if name]
    b = numpy_helper.to_array(stored[0])
    n_blocks = b.shape[1]
    codes = _unpack_nibbles(b.reshape(n, n_blocks, -1)).astype(np.float32)  # [N, blocks, block]
    scales = numpy_helper.to_array(stored[1]).astype(np.float32).reshape(n, n_blocks)
    if len(stored) > 2:
        zp = _unpack_nibbles(numpy_helper.to_array(stored[2]).reshape(n, -1))[:, :n_blocks].astype(np.float32)
    else:
        zp = np.full((n, n_blocks), 8.0, dtype=np.float32)
    w_t = ((codes - zp[..., None]) * scales[..., None]).reshape(n, n_blocks * block)[:, :k]
    return np.ascontiguousarray(w_t.T), sum(tensor_bits(t) for t in stored)


def _skip_reason(layer: WeightLayer, exclude: tuple[str, ...], gemm_as_matmul: bool = True) -> str:
    if layer.op_type == "Gemm" and gemm_as_matmul and layer.subgraph:
        return "gemm_as_matmul rewrites the main graph's Gemms, and this one sits in a subgraph"
    if layer.op_type == "Gemm" and gemm_as_matmul:
        return ("this Gemm could not be rewritten as MatMul (a transposed input A, a weight computed at run time or "
                "not 2-D, or a bias computed at run time with beta != 1)")
    if layer.op_type == "Gemm":
        return "Gemm is not rewritten by MatMulNBits; pass gemm_as_matmul=true to rewrite it as MatMul first"
    if layer.op_type != "MatMul":
        return f"MatMulNBits rewrites MatMul nodes only, not {layer.op_type}"
    if layer.weight is None:
        return layer.reason
    if layer.node_name in exclude:
        return "excluded by the config: kept in fp32"
    if layer.weight.ndim != 2:
        return f"its weight has rank {layer.weight.ndim}; MatMulNBits needs a 2-D weight"
    return "onnxruntime's quantizer left it in fp32"


def int4_layer_reports(fp32: onnx.ModelProto, qmodel: onnx.ModelProto, calib: np.ndarray | None,
                       exclude: tuple[str, ...], gemm_as_matmul: bool = True) -> list[LayerReport]:
    """One LayerReport per weight layer, subgraph ones included: action, bits per weight, weight SQNR, and output SQNR
    for the main graph's layers (a subgraph's tensors cannot be read out of onnxruntime)."""
    layers = find_weight_layers(fp32, subgraphs=True)
    data_in = layer_data_inputs(fp32, layers)
    out_db = output_sqnr(fp32, qmodel, [layer.output for layer in layers] + [i for i in data_in.values() if i],
                         calib) if calib is not None else {}
    inits, nbits = {}, {}
    for graph, _, scope in graphs_with_scope(qmodel):
        inits.update(scope)
        nbits.update({n.output[0]: n for n in graph.node if n.op_type == "MatMulNBits"})
    reports = []
    for layer in layers:
        error = {"output_sqnr_db": report_db(out_db.get(layer.output))} if calib is not None and not layer.subgraph else {}
        if data_in.get(layer.node_name) in out_db:  # the error arriving at the layer, against what it leaves
            error["input_sqnr_db"] = report_db(out_db[data_in[layer.node_name]])
        node = nbits.get(layer.output) if layer.op_type == "MatMul" else None
        if node is not None and layer.weight is not None:
            w, bits = dequantize_matmulnbits(node, inits)
            error["weight_sqnr_db"] = report_db(sqnr_db(layer.weight, w))
            reports.append(LayerReport(layer.node_name, "quantized", bits / layer.n_params, layer.n_params, error,
                                       graph=layer.subgraph))
        else:
            bpw = None if layer.weight is None else 8.0 * layer.weight.itemsize
            reports.append(LayerReport(layer.node_name, "skipped", bpw, layer.n_params, error, graph=layer.subgraph,
                                       reason=_skip_reason(layer, exclude, gemm_as_matmul)))
    return reports


def _save(model: onnx.ModelProto, path: Path) -> None:
    with atomic_path(path, force=True) as t:
        onnx.save(model, str(t))


@register_pass(Int4WeightOnlyConfig)
def _int4_weight_only(artifact: Artifact, config: Int4WeightOnlyConfig, ctx: PassContext) -> PassResult:
    fp32 = load_model(artifact.path)
    refuse_quantized(fp32, str(artifact.path))
    check_node_names(fp32, config.exclude, "exclude")
    rewritten = []
    if config.gemm_as_matmul:  # from here on the fp32 graph is the rewritten one: same values, MatMuls named as the Gemms
        fp32, rewritten = gemms_as_matmul(fp32)
    calib = None if ctx.calibration is None else first_samples(ctx.calibration_checked(), config.n_calibration)
    out = ctx.workdir / "model.int4.onnx"
    meta = {**artifact.meta, "precision": "int4"}
    _save(quantize_int4(fp32, config), out)
    new = Artifact("onnx", path=out, meta=meta)
    notes = [
        f"block_size {config.block_size}, {'symmetric' if config.symmetric else 'asymmetric'}, "
        f"accuracy_level {config.accuracy_level}.",
        "bits_per_weight counts, per quantized MatMul weight, the packed 4-bit codes (last block padded to "
        "block_size), one fp32 scale per block and, if asymmetric, one packed 4-bit zero point per block; "
        "fp32 (skipped) layers are not counted.",
    ]
    if rewritten:
        notes.append(f"{len(rewritten)} Gemm node(s) with a constant weight rewritten as MatMul (+ Add) first, so "
                     "MatMulNBits quantizes them (gemm_as_matmul).")
    if calib is None:
        notes.append("no calibration data given: per-layer output SQNR not measured.")
    report = PassReport(config.to_dict(), "onnx", "onnx", artifact.size_bytes(), new.size_bytes(), notes=notes)
    report.layers = int4_layer_reports(fp32, load_model(out), calib, config.exclude, config.gemm_as_matmul)
    if calib is not None:
        report.extra["restore_order"] = restore_order(report.layers)
    report.bits_per_weight = bits_per_weight(report.layers)
    if not any(layer.action == "quantized" for layer in report.layers) and not config.allow_empty:
        why = sorted({layer.reason for layer in report.layers if layer.reason}) or ["the model has no weight layer"]
        raise EdgesmithError(f"int4-weight-only quantized 0 of {len(report.layers)} weight layers of {artifact.path} "
                             f"({'; '.join(why)[:300]}).",
                             "MatMulNBits rewrites MatMul (and Gemm) nodes with constant 2-D weights only; keep the fp32 "
                             "or int8 model, or pass --option allow_empty=true.")
    if sensitivity_requested(ctx, report):
        def quantize_only(layer: str, path: Path) -> Artifact:
            _save(quantize_int4(fp32, config, only=[layer]), path)
            return Artifact("onnx", path=path, meta=meta)

        todo = [layer.name for layer in report.layers if layer.action == "quantized"]
        report.extra["sensitivity"] = sensitivity_table(artifact, todo, quantize_only, ctx, desc="int4 sensitivity")
    return PassResult(new, report)
