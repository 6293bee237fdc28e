"""Post-training static int8 quantization of an ONNX model in QDQ form (onnxruntime.quantization).

Weights: int8, symmetric, per output channel (for a MatMul weight [K, N] the channel axis is 1).
Activations: 8-bit with ranges calibrated on the producer's calibration samples, by min/max or by a
percentile of the observed histogram (which ignores rare outliers). The graph keeps fp32 MatMul/Add
nodes between QuantizeLinear/DequantizeLinear pairs; onnxruntime fuses them into integer kernels.

The model is prepared with ``quant_pre_process`` with its graph optimizations off: shape inference
helps the quantizer, but the optimizer would fuse MatMul+Add into Gemm and rename the nodes, and
``exclude`` lists and the per-layer report name the nodes of the exported model.

Bits per weight (per layer and for the pass): over the quantized MatMul/Gemm/Conv weight tensors
only, the bits of what the file stores for them (int8 values + one fp32 scale + one int8 zero
point per output channel, i.e. ``8 + 40 / K`` for a [K, N] MatMul weight) divided by the number
of weights. Biases (quantized by onnxruntime as per-tensor 8-bit inputs of Add) and layers kept
in fp32 are not counted.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
from onnx import numpy_helper

from edgesmith.compress.base import (Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult,
                                    first_samples, n_samples, register_pass)
from edgesmith.compress.onnx_analysis import (
    INTEGER_TYPES,
    WEIGHT_OPS,
    WeightLayer,
    as_quantizable_ops,
    batched_feeds,
    bits_per_weight,
    check_node_names,
    drop_output_quantizers,
    find_weight_layers,
    fold_batch_norms,
    fused_kernels,
    initializers,
    layer_data_inputs,
    load_model,
    output_sqnr,
    quantized_ops,
    quiet_onnxruntime,
    report_db,
    restore_order,
    scratch_cwd,
    sqnr_db,
    strip_identities,
    tensor_bits,
)
from edgesmith.compress.sensitivity import sensitivity_requested, sensitivity_table
from edgesmith.common import EdgesmithError, atomic_path, environment_error
from edgesmith.common.checks import is_int
from edgesmith.models.kinds.tensor import INT8_WEIGHT_OP_TYPES

CALIBRATIONS = ("minmax", "percentile")
ACTIVATION_TYPES = ("uint8", "int8")
_CALIBRATION_BATCH = 64


@dataclass
class Int8QdqConfig(PassConfig):
    """Static int8 QDQ quantization.

    ``calibration``: "minmax" or "percentile" (``percentile`` of the activation histogram, 99.99 by
    default). ``n_calibration``: how many calibration samples to use (the first ones given).
    ``exclude``: node names kept in fp32. ``op_types``: the operator types to quantize; the default is the layers
    that hold weights (MatMul, Gemm, Conv, ConvTranspose, Gather); empty quantizes every type onnxruntime's QDQ
    quantizer knows, residual Adds, Concats and Softmax included (onnxruntime's own default). ``activations``: "uint8" (asymmetric; onnxruntime's
    advice for x86, with or without VNNI) or "int8" (e.g. for ARM). ``symmetric_activations``: int8 activations
    with zero point 0 over a symmetric range, the form TensorRT's explicit quantization takes (with full-range
    weights, ``reduce_range`` false). ``reduce_range``: 7-bit weights, the fix
    onnxruntime documents for x86 CPUs without VNNI, whose u8s8 kernels (VPMADDUBSW) saturate 16-bit sums when
    the weights use the full int8 range; None decides by this machine's CPU (``x86_without_vnni``), where the
    model is calibrated, checked and measured. ``choose_op_types``: quantize twice, with ``op_types`` and with
    every type onnxruntime knows, and keep the model whose outputs are closer to fp32's on the calibration samples
    (scored by its worst output's SQNR); twice the time. Small convnets keep up to 4 dB more with the full set; most
    transformers 1-5 dB more with the weight layers, vision transformers and Whisper's encoder about 20.
    ``output_quantizers``: false removes each quantize/dequantize pair on a layer's output that no quantized layer
    reads, so quantizers sit on layers' inputs only: the form OpenVINO's low-precision transformations fuse (the
    placement NNCF makes), which the openvino runtime asks for. onnxruntime runs such a layer as dequantize and a
    float kernel, so that form is for OpenVINO only.
    """

    kind: ClassVar[str] = "int8-qdq"
    input_format: ClassVar[str] = "onnx"
    output_format: ClassVar[str] = "onnx"

    calibration: str = "minmax"
    percentile: float = 99.99
    n_calibration: int = 128
    exclude: tuple[str, ...] = ()
    op_types: tuple[str, ...] = INT8_WEIGHT_OP_TYPES
    activations: str = "uint8"
    allow_empty: bool = False  # accept a result with no layer quantized (otherwise that is an error)
    reduce_range: bool | None = None
    choose_op_types: bool = False
    symmetric_activations: bool = False
    output_quantizers: bool = True

    def validate(self) -> None:
        if self.calibration not in CALIBRATIONS:
            self._fail("calibration", f"is {self.calibration!r}", f"use one of: {', '.join(CALIBRATIONS)}.")
        if isinstance(self.percentile, bool) or not isinstance(self.percentile, (int, float)) \
                or not 50.0 < float(self.percentile) <= 100.0:
            self._fail("percentile", f"is {self.percentile!r}",
                       "use a number above 50 and at most 100, e.g. 99.99 (100 keeps every value).")
        if not is_int(self.n_calibration, 1):
            self._fail("n_calibration", f"is {self.n_calibration!r}", "use a whole number of samples, at least 1.")
        if isinstance(self.exclude, str) or not all(isinstance(n, str) for n in self.exclude):
            self._fail("exclude", f"is {self.exclude!r}", "give a list of node names, e.g. [\"/0/MatMul\"].")
        self.exclude = tuple(self.exclude)
        known = qdq_op_types()
        if isinstance(self.op_types, str) or any(t not in known for t in self.op_types):
            self._fail("op_types", f"is {self.op_types!r}",
                       f"give a list of operator types onnxruntime quantizes, e.g. [\"MatMul\", \"Gemm\", \"Conv\"] "
                       f"(all: {', '.join(sorted(known))}).")
        self.op_types = tuple(self.op_types)
        if not isinstance(self.choose_op_types, bool):
            self._fail("choose_op_types", f"is {self.choose_op_types!r}", "use true or false.")
        if not isinstance(self.allow_empty, bool):
            self._fail("allow_empty", f"is {self.allow_empty!r}", "use true or false.")
        if self.reduce_range is not None and not isinstance(self.reduce_range, bool):
            self._fail("reduce_range", f"is {self.reduce_range!r}", "use true, false, or leave it out (auto).")
        if self.activations not in ACTIVATION_TYPES:
            self._fail("activations", f"is {self.activations!r}", f"use one of: {', '.join(ACTIVATION_TYPES)}.")
        if not isinstance(self.output_quantizers, bool):
            self._fail("output_quantizers", f"is {self.output_quantizers!r}", "use true or false.")
        if not isinstance(self.symmetric_activations, bool):
            self._fail("symmetric_activations", f"is {self.symmetric_activations!r}", "use true or false.")
        if self.symmetric_activations and self.activations != "int8":
            self._fail("symmetric_activations", "is true with uint8 activations",
                       "use activations=int8 with it (a symmetric uint8 range would centre zero at code 128).")


@functools.lru_cache(maxsize=1)
def qdq_op_types() -> frozenset[str]:
    """The operator types onnxruntime's static quantizer takes in QDQ format: its QLinear and QDQ registries, the set
    it quantizes when no list is given."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return frozenset(QDQRegistry) | frozenset(QLinearOpsRegistry)


@functools.lru_cache(maxsize=8)
def x86_without_vnni(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True on an x86 CPU that lacks VNNI (AVX-512 VNNI or AVX-VNNI): there onnxruntime's u8s8 integer kernels
    can saturate, and 7-bit weights (reduce_range) keep int8 models accurate. Read once per file per process."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return False
    try:
        with open(cpuinfo) as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return bool(flags) and not {"avx512_vnni", "avx_vnni"} & set(flags)


def reduce_range(config: "Int8QdqConfig") -> bool:
    return x86_without_vnni() if config.reduce_range is None else config.reduce_range


class _Reader:
    """Feeds calibration samples to onnxruntime's calibrator in batches the model accepts (its own batch
    when fixed, else 64), one array per named input.

    onnxruntime's ``CalibrationDataReader`` is duck-typed (anything with ``get_next``), so this need
    not import onnxruntime when ``compress`` is imported.
    """

    def __init__(self, model: onnx.ModelProto, x):
        self._feeds = batched_feeds(model, x, _CALIBRATION_BATCH)
        if not self._feeds:
            raise EdgesmithError("the calibration data do not fill one batch of the model's fixed batch size.",
                                 "give at least as many calibration samples as the model's batch.")
        self._it = iter(self._feeds)

    def get_next(self):
        return next(self._it, None)

    def __len__(self):
        return len(self._feeds)


_INTEGER = INTEGER_TYPES | {onnx.TensorProto.BOOL}  # a Cast to bool ends index arithmetic too


def index_arithmetic_nodes(model: onnx.ModelProto) -> list[str]:
    """Nodes of float arithmetic whose result is cast to an integer and that read no activation: index computations
    such as T5's relative-position buckets (positions -> float -> log -> scale -> int64 -> Gather). Quantizing them
    shifts the integers they produce (T5's bucket Gather then reads index -9.2e18). Found by walking back from each
    Cast to an integer type through float tensors, stopping at integer tensors and constants; a walk that reaches a
    float graph input or a weight layer's output is activation arithmetic and is left to the quantizer."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.input,
                                                             *inferred.graph.output)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    producer = {o: n for n in model.graph.node for o in n.output}
    inputs = {i.name for i in model.graph.input}
    out: dict[str, None] = {}
    for cast in model.graph.node:
        to = next((a.i for a in cast.attribute if a.name == "to"), None)
        if cast.op_type != "Cast" or to not in _INTEGER or types.get(cast.input[0]) in _INTEGER | {None}:
            continue
        found, stack, seen, activation = [], [cast.input[0]], set(), False
        while stack and not activation:
            name = stack.pop()
            if name in seen or types.get(name) in _INTEGER:
                continue
            seen.add(name)
            node = producer.get(name)
            if node is None:  # a constant, or a graph input: float inputs are activations
                activation = name in inputs
                continue
            if node.op_type in WEIGHT_OPS:
                activation = True
                continue
            found.append(node.name)
            stack.extend(i for i in node.input if i)
        if not activation:
            out.update(dict.fromkeys(n for n in found if n))
    return list(out)


MASK_RANGE = 1e30  # a calibrated |range| beyond this is a sentinel (torch.finfo.min masks, -inf), not an activation


def mask_nodes(model: onnx.ModelProto, cache: Path, already: set) -> list[str]:
    """Nodes that read or write a tensor whose calibrated range (onnxruntime's calibration cache) is not finite or
    reaches beyond ``MASK_RANGE``, except those in ``already``."""
    import json

    data = json.loads(Path(cache).read_text()).get("data", {}) if Path(cache).is_file() else {}
    def values(end) -> np.ndarray:  # {"data": [v]} per tensor end ({"data": v} after percentile calibration)
        return np.ravel(np.asarray(end.get("data", []) if isinstance(end, dict) else end, dtype=np.float64))

    huge = set()
    for name, r in data.items():
        ends = np.concatenate([values(r.get(key, [])) for key in ("lowest", "highest")])
        if ends.size and (not np.isfinite(ends).all() or np.abs(ends).max() >= MASK_RANGE):
            huge.add(name)
    return [n.name for n in model.graph.node if n.name and n.name not in already
            and huge & {*n.input, *n.output}]


def _quantize(prepared: Path, out: Path, calib: np.ndarray, config: Int8QdqConfig, cache: Path,
              *, nodes_to_quantize: list[str] | None = None, keep: tuple[str, ...] = ()) -> None:
    """One quantize_static call; the calibration ranges are computed once and cached in ``cache``."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    reader = _Reader(load_model(prepared), calib)
    method = CalibrationMethod.MinMax if config.calibration == "minmax" else CalibrationMethod.Percentile
    extra = {
        "WeightSymmetric": True,
        "ActivationSymmetric": config.symmetric_activations,
        "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1},
        # One-sided percentiles: a symmetric range would waste half the codes on ReLU outputs.
        "CalibTensorRangeSymmetric": config.symmetric_activations,
        "CalibPercentile": float(config.percentile),
    }
    try:
        with quiet_onnxruntime(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy on a sentinel range; mask_nodes handles those
            quantize_static(
                str(prepared), str(out), reader, quant_format=QuantFormat.QDQ, per_channel=True,
                reduce_range=reduce_range(config), weight_type=QuantType.QInt8,
                activation_type=QuantType.QUInt8 if config.activations == "uint8" else QuantType.QInt8,
                nodes_to_quantize=nodes_to_quantize, nodes_to_exclude=[*config.exclude, *keep],
                op_types_to_quantize=list(config.op_types) or None,
                calibrate_method=method, extra_options=extra, calibration_cache_path=str(cache),
            )
    except EdgesmithError:
        raise
    except OSError as e:  # the machine's, not the model's: a full disk, a file-size limit
        err = environment_error(e, Path(e.filename or out))
        if err is None:
            raise
        raise err from None
    except Exception as e:  # onnxruntime raises ValueError, RuntimeError, Fail...: all mean "cannot quantize"
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        shape_problem = any(w in msg.lower() for w in ("shape", "dimension", "rank", "invalid_argument", "got invalid"))
        fix = ("check the calibration data against the model's inputs (names, dtypes and shapes, batch included)."
               if shape_problem else "exclude the failing node(s) with `exclude`, or re-export the model.")
        raise EdgesmithError(f"onnxruntime could not quantize the model to int8: {msg[:300]}", fix) from None


def _prepare(src: Path, dst: Path, notes: list[str]) -> None:
    """Shape inference for the quantizer (no graph fusion: node names must stay those of ``src``), after
    removing Identity nodes (in front of Conv biases they stop onnxruntime fusing QDQ into integer kernels)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, dst = Path(src).resolve(), Path(dst).resolve()  # before the chdir below: relative paths stay right
    model = load_model(src)
    removed = strip_identities(model)
    if removed:
        notes.append(f"{removed} Identity node(s) removed before quantization (they block integer-kernel fusion)")
    stripped = dst.with_name("stripped.onnx")
    onnx.save(model, str(stripped))
    try:
        # when its symbolic shape inference gives up, onnxruntime dumps sym_shape_infer_temp.onnx and
        # uuid-named .data files into the working directory: run it inside a scratch folder instead
        with quiet_onnxruntime(), scratch_cwd():
            quant_pre_process(str(stripped), str(dst), skip_optimization=True)
    except Exception as e:  # symbolic shape inference fails on some exotic graphs; quantizing still works
        notes.append(f"quant_pre_process failed ({type(e).__name__}); quantized the model as exported.")
        onnx.save(model, str(dst))


def refuse_quantized(model: onnx.ModelProto, what: str) -> None:
    """A model that already holds quantized operators is not quantized again (one clear error, not a
    traceback from deep inside the quantizer)."""
    done = sorted(quantized_ops(model))
    if done:
        raise EdgesmithError(f"{what} is already quantized (it holds {', '.join(done)}).",
                             "quantize the fp32 model instead.")


def dequantized_int8_weight(qmodel: onnx.ModelProto, layer: WeightLayer) -> tuple[np.ndarray, int] | None:
    """The weight ``layer`` computes with in ``qmodel`` and the bits it is stored in, or None if fp32.

    Stored bits: int8 values + scale (fp32) + zero point (int8), one scale/zero point per channel.
    """
    inits = initializers(qmodel)
    node = next((n for n in qmodel.graph.node if n.name == layer.node_name), None)
    if node is None or len(node.input) < 2:
        return None
    dq = next((n for n in qmodel.graph.node if n.op_type == "DequantizeLinear" and node.input[1] in n.output), None)
    if dq is None or dq.input[0] not in inits or inits[dq.input[0]].data_type != onnx.TensorProto.INT8:
        return None
    parts = [inits[name] for name in dq.input if name]
    q, scale = (numpy_helper.to_array(t) for t in parts[:2])
    zp = numpy_helper.to_array(parts[2]) if len(parts) > 2 else np.zeros_like(scale, dtype=np.int8)
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    shape = [1] * q.ndim
    if scale.ndim == 1:
        shape[axis] = scale.size
    w = (q.astype(np.float32) - zp.astype(np.float32).reshape(shape)) * scale.astype(np.float32).reshape(shape)
    return w, sum(tensor_bits(t) for t in parts)


def int8_layer_reports(fp32: onnx.ModelProto, qmodel: onnx.ModelProto, calib: np.ndarray,
                       exclude: tuple[str, ...]) -> list[LayerReport]:
    """One LayerReport per weight layer: action, bits per weight, weight and output SQNR."""
    layers = find_weight_layers(fp32)
    data_in = layer_data_inputs(fp32, layers)
    out_db = output_sqnr(fp32, qmodel, [layer.output for layer in layers] + [i for i in data_in.values() if i], calib)
    reports = []
    for layer in layers:
        error = {"output_sqnr_db": report_db(out_db.get(layer.output))}
        if data_in.get(layer.node_name) in out_db:  # the error arriving at the layer, against what it leaves
            error["input_sqnr_db"] = report_db(out_db[data_in[layer.node_name]])
        deq = dequantized_int8_weight(qmodel, layer) if layer.weight is not None else None
        if deq is not None:
            w, bits = deq
            error["weight_sqnr_db"] = report_db(sqnr_db(layer.weight, w))
            reports.append(LayerReport(layer.node_name, "quantized", bits / layer.n_params, layer.n_params, error))
            continue
        if layer.weight is None:
            reason = layer.reason
        elif layer.node_name in exclude:
            reason = "excluded by the config: kept in fp32"
        else:
            reason = "onnxruntime's quantizer left its weight in fp32"
        bpw = None if layer.weight is None else 8.0 * layer.weight.itemsize
        reports.append(LayerReport(layer.node_name, "skipped", bpw, layer.n_params, error, reason=reason))
    return reports


def _op_set_words(op_types, short: bool = False) -> str:
    if short:
        return "weight layers" if tuple(op_types) == INT8_WEIGHT_OP_TYPES else (
            "every type" if not op_types else "/".join(op_types))
    return ("operator types " + ", ".join(op_types) + " only" if op_types else
            "every operator type onnxruntime's quantizer knows (op_types empty)")


def _kept_calibration(folder: Path | None, prepared: Path, calib, config: Int8QdqConfig) -> Path | None:
    """Where ranges calibrated for this prepared graph, calibration data and calibration settings are kept in
    ``folder`` (``PassContext.keep``); None without a folder. What is left out (``exclude``) is not in the key: it
    only shrinks the tensors a run needs, and each kept file records the exclusions it was calibrated with."""
    if folder is None:
        return None
    h = hashlib.sha256(prepared.read_bytes())
    for a in (calib.values() if isinstance(calib, dict) else [calib]):
        h.update(np.ascontiguousarray(a).tobytes())
    settings = {k: v for k, v in config.to_dict().items() if k not in ("exclude", "allow_empty", "output_quantizers")}
    h.update(json.dumps(settings, sort_keys=True).encode())
    return Path(folder) / f"int8-calibration-{h.hexdigest()[:24]}.json"


def _quantize_op_set(fp32: onnx.ModelProto, prepared: Path, out: Path, calib: np.ndarray, config: Int8QdqConfig,
                     cache: Path, index_nodes: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """Quantize ``prepared`` to ``out`` with ``config``'s operator types: (the nodes kept in fp32, notes saying why).
    Index arithmetic is kept from the start; nodes the calibration finds reading or writing a mask are kept on a
    second run over the ranges already calibrated (``cache``)."""
    op_of = {n.name: n.op_type for n in fp32.graph.node}

    def quantizable(name: str) -> bool:  # a node of a type int8 leaves alone needs no keeping, nor a note
        return name not in config.exclude and (not config.op_types or op_of.get(name) in config.op_types)

    notes = []
    keep = tuple(n for n in index_nodes if quantizable(n))
    if keep:
        notes.append(f"{len(keep)} node(s) of float arithmetic that computes integer indices kept in fp32 (e.g. T5's "
                     "relative-position buckets, OPT's positions from the mask): quantized, they shift the indices")
    _quantize(prepared, out, calib, config, cache, keep=keep)
    masks = [n for n in mask_nodes(fp32, cache, set(keep)) if quantizable(n)]
    if masks:
        keep += tuple(masks)
        notes.append(f"{len(masks)} node(s) reading or writing a mask-like tensor (calibrated range beyond "
                     f"+-{MASK_RANGE:.0e}, e.g. attention scores plus -3.4e38 at masked positions) kept in fp32: 8-bit "
                     "codes over that range would erase the values")
        _quantize(prepared, out, calib, config, cache, keep=keep)
    return keep, notes


@register_pass(Int8QdqConfig)
def _int8_qdq(artifact: Artifact, config: Int8QdqConfig, ctx: PassContext) -> PassResult:
    calib_all = ctx.calibration_checked()
    calib = first_samples(calib_all, config.n_calibration)
    fp32 = load_model(artifact.path)
    refuse_quantized(fp32, str(artifact.path))
    opset = next((o.version for o in fp32.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < 13:  # onnxruntime's quantizer would quietly quantize no layer
        raise EdgesmithError(f"{artifact.path} uses ONNX opset {opset}; int8-qdq needs opset 13 or newer (per-channel "
                             "weights).", "upgrade it (onnx.version_converter.convert_version(model, 13)), or use "
                             "`edgesmith quantize`/`deploy`, which upgrade it.")
    strip_identities(fp32)  # the graph the quantizer sees (node names are kept)
    check_node_names(fp32, config.exclude, "exclude")
    out = ctx.workdir / "model.int8.onnx"
    meta = {**artifact.meta, "precision": "int8"}
    notes = [
        f"activations {config.activations}" + (" symmetric (zero point 0)" if config.symmetric_activations else "")
        + f", calibrated with {config.calibration}"
        + (f" ({config.percentile} percentile)" if config.calibration == "percentile" else "")
        + f" on {n_samples(calib)} samples"
        + (f" (of {n_samples(calib_all)} given)" if n_samples(calib_all) > n_samples(calib) else "") + ".",
        "bits_per_weight counts, per quantized MatMul/Gemm/Conv weight, the int8 values plus one fp32 scale "
        "and one int8 zero point per output channel; biases and fp32 (skipped) layers are not counted.",
    ]
    if reduce_range(config):
        notes.append("weights use 7 of their 8 bits (reduce_range" + (": this x86 CPU has no VNNI, and onnxruntime's u8s8 "
                     "kernels saturate 16-bit sums with full-range int8 weights)" if config.reduce_range is None else ")"))
    report = PassReport(config.to_dict(), "onnx", "onnx", artifact.size_bytes(), 0, notes=notes)
    folded = fold_batch_norms(fp32)  # from here on the fp32 graph is the folded one: same values, the Convs' names
    if folded:
        report.notes.append(f"{folded} BatchNormalization node(s) folded into the Conv before them (onnxruntime folds "
                            "them in fp32 too; left alone, each would sit in fp32 between two integer Convs)")
    candidate_sets = [config.op_types] + ([()] if config.choose_op_types else [])
    if any(not ops or "Mul" in ops for ops in candidate_sets):  # where Mul stays fp32 the rewrite only adds nodes
        rewritten = as_quantizable_ops(fp32)
        folded += sum(rewritten.values())
        if rewritten:
            report.notes.append("rewritten with the same values so that they can stay in int8: "
                                + ", ".join(f"{v} {k}" for k, v in rewritten.items())
                                + " (Div by a constant as Mul by its reciprocal, HardSigmoid as Mul, Add, Clip)")
    index_nodes = index_arithmetic_nodes(fp32)
    with tempfile.TemporaryDirectory(prefix=".int8.", dir=ctx.workdir) as tmp:
        prepared, source = Path(tmp) / "prepared.onnx", artifact.path
        if folded:
            source = Path(tmp) / "folded.onnx"
            onnx.save(fp32, str(source))
        _prepare(source, prepared, report.notes)
        sets = [config.op_types] + ([()] if config.choose_op_types and config.op_types else [])
        tried = []
        for k, op_types in enumerate(sets):
            cand = dataclasses.replace(config, op_types=op_types)
            path, cache = Path(tmp) / f"candidate{k}.onnx", Path(tmp) / f"calibration{k}.json"
            kept = _kept_calibration(ctx.keep, prepared, calib, cand)
            if kept is not None and kept.exists() and set(json.loads(kept.with_suffix(".exclude").read_text())) \
                    <= set(cand.exclude):  # ranges of every tensor this run quantizes (it leaves out no fewer layers)
                shutil.copyfile(kept, cache)
                report.notes.append("calibration ranges reused from an earlier run on the same model and data")
            try:
                keep, cand_notes = _quantize_op_set(fp32, prepared, path, calib, cand, cache, index_nodes)
            except EdgesmithError as e:
                if k == 0:
                    raise
                report.notes.append(f"{_op_set_words(op_types)}: not quantized ({e.problem}); kept the first set")
                continue
            tried.append({"op_types": list(op_types), "cand": cand, "path": path, "cache": cache, "keep": keep,
                          "notes": cand_notes})
            if kept is not None and not kept.exists() and cache.is_file():
                kept.parent.mkdir(parents=True, exist_ok=True)
                kept.with_suffix(".exclude").write_text(json.dumps(list(cand.exclude)))
                shutil.copyfile(cache, kept)
        if len(tried) > 1:
            for t in tried:
                got = output_sqnr(fp32, load_model(t["path"]), [o.name for o in fp32.graph.output], calib)
                t["output_sqnr_db"] = min(got.values()) if got else float("-inf")
        best = max(tried, key=lambda t: t.get("output_sqnr_db", 0.0))  # the first set wins a tie
        config_used, keep, cache = best["cand"], best["keep"], best["cache"]
        report.notes[0] = _op_set_words(config_used.op_types) + "; " + report.notes[0]
        report.notes += best["notes"]
        if len(tried) > 1:
            report.extra["op_types_choice"] = {
                "chosen": best["op_types"], "by": "output SQNR on the calibration samples (worst output)",
                "candidates": [{"op_types": t["op_types"], "output_sqnr_db": report_db(t["output_sqnr_db"])}
                               for t in tried]}
            report.notes.append("operator types chosen by output SQNR on the calibration samples: "
                                + ", ".join(f"{_op_set_words(t['op_types'], short=True)} {t['output_sqnr_db']:.1f} dB"
                                            for t in tried)
                                + f" -> {_op_set_words(best['op_types'], short=True)}")
        if not config.output_quantizers:
            qmodel = load_model(best["path"])
            dropped = drop_output_quantizers(qmodel, config_used.op_types or qdq_op_types())
            onnx.save(qmodel, str(best["path"]))
            report.notes.append(f"quantizers on layers' inputs only (output_quantizers=false): {dropped // 2} output "
                                "quantize/dequantize pair(s) that no quantized layer reads removed, the form OpenVINO "
                                "fuses (onnxruntime runs those layers in float)")
        with atomic_path(out, force=True) as written:
            os.replace(best["path"], written)
        new = Artifact("onnx", path=out, meta=meta)
        if not ctx.detail:  # a rebuild that is only scored: no per-layer table, no kernel count
            report.size_after_bytes = new.size_bytes()
            report.notes.append("per-layer reports skipped: a rebuild scored only (PassContext.detail false)")
            return PassResult(new, report)
        report.layers = int8_layer_reports(fp32, load_model(out), calib, config.exclude)
        report.extra["restore_order"] = restore_order(report.layers)
        if sensitivity_requested(ctx, report):
            def quantize_only(layer: str, path: Path) -> Artifact:
                _quantize(prepared, path, calib, config_used, cache, nodes_to_quantize=[layer], keep=keep)
                return Artifact("onnx", path=path, meta=meta)

            todo = [layer.name for layer in report.layers if layer.action == "quantized"]
            report.extra["sensitivity"] = sensitivity_table(artifact, todo, quantize_only, ctx, desc="int8 sensitivity")
    report.size_after_bytes = new.size_bytes()
    report.bits_per_weight = bits_per_weight(report.layers)
    quantized = sum(layer.action == "quantized" for layer in report.layers)
    if quantized == 0 and not config.allow_empty and any("mask-like" in n for n in report.notes):
        peak = float(np.max(np.abs(np.concatenate([np.ravel(v) for v in calib.values()])))) \
            if isinstance(calib, dict) else float(np.max(np.abs(calib)))
        cause = (f"the calibration data reaches {peak:.1e}" if peak >= MASK_RANGE ** 0.5 else
                 f"the calibration data stays within {peak:.1e}, so the model itself makes them: masks, or weights "
                 "near the float32 limit")
        raise EdgesmithError(f"int8-qdq kept every weight layer in fp32: each reads or writes an activation whose "
                             f"calibrated range reaches beyond +-{MASK_RANGE:.0e}, where 8-bit codes would erase the "
                             f"values ({cause}).",
                             "calibrate on data of the scale the model sees in use (normalised inputs), check the "
                             "model's weights, or pass --option allow_empty=true to keep the fp32 model.")
    if quantized == 0 and not config.allow_empty:
        raise EdgesmithError(f"int8-qdq quantized 0 of {len(report.layers)} weight layers of {artifact.path}.",
                             "nothing would change: keep the fp32 model, or pass --option allow_empty=true.")
    kernels = fused_kernels(out)
    report.extra["kernels"] = kernels
    report.notes.append(f"onnxruntime runs {kernels['integer']} integer kernel(s) "
                        f"({', '.join(f'{k} {v}' for k, v in kernels['integer_kernels'].items()) or 'none'}) and "
                        f"{kernels['float']} float Conv/MatMul/Gemm kernel(s) for {quantized} quantized layer(s)")
    return PassResult(new, report)
