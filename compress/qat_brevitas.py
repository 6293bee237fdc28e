"""Quantization-aware training with brevitas: ``qat-w8a8`` and ``qat-w4a8`` (torch -> ONNX QCDQ).

Every ``nn.Linear`` / ``nn.Conv1d`` / ``nn.Conv2d`` of a copy of the model becomes its brevitas twin
(``QuantLinear`` / ``QuantConv1d`` / ``QuantConv2d``) with the float weights copied in: weights per output
channel, symmetric, ``weight_bits`` (or ``layer_bits[name]``, e.g. from a sensitivity table); the layer's
input quantized per tensor to ``act_bits`` (signed, learned scale). The activation scales are first set by a
calibration pass over the training inputs (``brevitas.graph.calibrate.calibration_mode``), then the model
is fine-tuned for ``epochs`` with Adam: cross-entropy on the labels when the training data has integer labels
and the model returns one logit per class, otherwise distillation (MSE to the float model's outputs), which
needs inputs only. Export is brevitas's QCDQ ONNX (QuantizeLinear / Clip / DequantizeLinear around float
ops: weights are int8 constants, onnxruntime fuses the 8-bit pairs into integer kernels; 4-bit weights are
int8 constants clipped to [-8, 7], so they take 8 bits on disk: QCDQ has no packed int4).

Training data (``PassContext.train_data``): an array of inputs, or ``(inputs, labels)``; without it the
calibration samples are used for distillation. ``PassContext.train_fn`` (the Python API's ``train_fn=``): the
user's own loop, called as ``train_fn(model)`` on the calibrated brevitas model in place of the built-in one. Sizes and timings: see the pass report.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from edgesmith.common import EdgesmithError, atomic_path, check_finite_array, seed_everything
from edgesmith.common.checks import is_int
from edgesmith.compress.base import (Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult,
                                    register_pass)
from edgesmith.compress.export_onnx import INPUT_NAME, OUTPUT_NAME

QUANT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


@dataclass
class QatBrevitasConfig(PassConfig):
    """Brevitas QAT: ``weight_bits`` per-channel weights, ``act_bits`` layer inputs, ``epochs`` of fine-tuning
    at ``lr`` in batches of ``batch`` (0: calibration only, i.e. brevitas PTQ); ``layer_bits`` overrides the
    weight bits by module name; ``keep_8bit``: that many layers, the ones whose weights at ``weight_bits`` move
    the outputs most (``layer_sensitivity``), keep 8-bit weights (``layer_bits`` still wins). ``form``: ``qcdq`` (brevitas's portable QCDQ file) or ``ort-integer`` (its
    Linear layers lowered to onnxruntime's integer MatMulIntegerToFloat, see ``qcdq_integer``)."""

    kind: ClassVar[str] = "qat-brevitas"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "onnx"

    weight_bits: int = 8
    act_bits: int = 8
    epochs: int = 3
    lr: float = 1e-4
    batch: int = 64
    layer_bits: dict = field(default_factory=dict)
    seed: int = 0
    form: str = "qcdq"
    keep_8bit: int = 0

    FORMS: ClassVar[tuple[str, ...]] = ("qcdq", "ort-integer")

    def validate(self) -> None:
        for name in ("weight_bits", "act_bits"):
            v = getattr(self, name)
            if not is_int(v, 2, 8):
                self._fail(name, f"is {v!r}", "use a whole number of bits from 2 to 8.")
        check_training_fields(self, "0: calibration only")
        k = self.keep_8bit
        if not is_int(k, 0):
            self._fail("keep_8bit", f"is {k!r}", "use how many of the most sensitive layers keep 8-bit weights (0: none).")
        if self.form not in self.FORMS:
            self._fail("form", f"is {self.form!r}", f"use one of {', '.join(self.FORMS)} (ort-integer: Linear layers "
                       "as onnxruntime's integer MatMulIntegerToFloat).")
        for name, bits in dict(self.layer_bits).items():
            if not is_int(bits, 2, 8):
                self._fail("layer_bits", f"gives {name!r} {bits!r} bits", "use whole numbers of bits from 2 to 8.")


def check_training_fields(config: PassConfig, zero_epochs: str) -> None:
    """The fine-tuning fields every QAT config shares: ``epochs``, ``lr``, ``batch``."""
    if not is_int(config.epochs, 0):
        config._fail("epochs", f"is {config.epochs!r}", f"use zero or more epochs ({zero_epochs}).")
    if not 0.0 < float(config.lr) < 1.0:
        config._fail("lr", f"is {config.lr!r}", "use a small positive learning rate, e.g. 1e-4.")
    if not is_int(config.batch, 1):
        config._fail("batch", f"is {config.batch!r}", "use a batch of at least one sample.")


@dataclass
class QatW8A8Config(QatBrevitasConfig):
    kind: ClassVar[str] = "qat-w8a8"


@dataclass
class QatW4A8Config(QatBrevitasConfig):
    kind: ClassVar[str] = "qat-w4a8"

    weight_bits: int = 4


def copy_parameters(dst: nn.Module, src: nn.Module) -> nn.Module:
    """``src``'s weight (and bias) into its quantized twin ``dst``; returns ``dst``."""
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        if src.bias is not None:
            dst.bias.copy_(src.bias)
    return dst


def swap_layers(parent: nn.Module, types: tuple, twin, prefix: str = "") -> None:
    """Replace, in place and at any depth, every child of one of ``types`` by ``twin(full_name, child)``."""
    for name, child in parent.named_children():
        full = f"{prefix}{name}"
        if isinstance(child, types):
            setattr(parent, name, twin(full, child))
        else:
            swap_layers(child, types, twin, full + ".")


def quantized_copy(module: nn.Module, config: QatBrevitasConfig) -> tuple[nn.Module, list[dict]]:
    """A copy of ``module`` with every Linear/Conv swapped for its brevitas twin; and the layers swapped."""
    import brevitas.nn as qnn
    from brevitas.quant import Int8ActPerTensorFloat, Int8WeightPerChannelFloat

    model = copy.deepcopy(module).float()
    unknown = set(config.layer_bits) - {n for n, m in model.named_modules() if isinstance(m, QUANT_LAYERS)}
    if unknown:
        raise EdgesmithError(f"layer_bits names layers the model does not have: {', '.join(sorted(unknown))}.",
                             "use the module names of its Linear/Conv layers (see the sensitivity table).")
    layers: list[dict] = []

    def twin(name: str, m: nn.Module) -> nn.Module:
        bits = int(config.layer_bits.get(name, config.weight_bits))
        common = dict(bias=m.bias is not None, weight_quant=Int8WeightPerChannelFloat, weight_bit_width=bits,
                      input_quant=Int8ActPerTensorFloat, input_bit_width=config.act_bits, return_quant_tensor=False)
        if isinstance(m, nn.Linear):
            q = qnn.QuantLinear(m.in_features, m.out_features, **common)
        else:
            cls = qnn.QuantConv1d if isinstance(m, nn.Conv1d) else qnn.QuantConv2d
            q = cls(m.in_channels, m.out_channels, m.kernel_size, stride=m.stride, padding=m.padding,
                    dilation=m.dilation, groups=m.groups, **common)
        copy_parameters(q, m)
        layers.append({"name": name, "type": type(m).__name__, "weight_bits": bits, "params": int(m.weight.numel())})
        return q

    if isinstance(model, QUANT_LAYERS):
        raise EdgesmithError("qat passes take a model that contains layers, not a bare layer.",
                             "wrap the layer in an nn.Sequential.")
    swap_layers(model, QUANT_LAYERS, twin)
    if not layers:
        raise EdgesmithError("the model has no Linear or Conv layer for brevitas to quantize.",
                             "use int8-qdq or int4-weight-only on models without such layers.")
    return model, layers


def layer_sensitivity(module: nn.Module, x: np.ndarray, config: QatBrevitasConfig) -> list[dict]:
    """Per Linear/Conv layer, most sensitive first: the output error when only that layer's weights are at
    ``config.weight_bits`` and every other layer's at 8 bits (brevitas calibration only, no fine-tuning), as
    relative squared error and SQNR against the float model on up to 256 inputs; ``delta_db`` is the SQNR lost
    against the all-8-bit model."""
    import dataclasses

    xs = np.asarray(x[:256], np.float32)
    xt = torch.from_numpy(xs)
    with torch.no_grad():
        ref = module.eval()(xt).float()
    power = float((ref ** 2).mean()) or 1e-30

    def error(bits: dict) -> float:
        cfg = dataclasses.replace(config, weight_bits=8, layer_bits=bits, keep_8bit=0)
        q, _ = quantized_copy(module, cfg)
        calibrate(q, xs, cfg)
        with torch.no_grad():
            return float(((q(xt).float() - ref) ** 2).mean()) / power

    base = error({})
    rows = []
    for name, m in module.named_modules():
        if isinstance(m, QUANT_LAYERS):
            e = error({name: config.weight_bits})
            rows.append({"layer": name, "params": int(m.weight.numel()), "bits": config.weight_bits,
                         "relative_error": e, "sqnr_db": float(-10 * np.log10(max(e, 1e-30))),
                         "delta_db": float(10 * np.log10(max(e, 1e-30) / max(base, 1e-30)))})
    return sorted(rows, key=lambda r: -r["relative_error"])


def _training_arrays(ctx: PassContext) -> tuple[np.ndarray, np.ndarray | None, str]:
    data = ctx.train_data
    if isinstance(data, tuple) and len(data) == 2:
        x, y = data
        return check_finite_array(np.asarray(x, np.float32), "QAT training inputs"), np.asarray(y), "training data"
    if isinstance(data, np.ndarray):
        return check_finite_array(data.astype(np.float32), "QAT training inputs"), None, "training inputs"
    if data is not None:
        raise EdgesmithError(f"QAT takes training data as an array of inputs or (inputs, labels), not "
                             f"{type(data).__name__}.", "give --train-data train.npz (inputs, and labels inside) or fine-tune elsewhere.")
    calib = ctx.calibration_checked("training or calibration inputs (QAT distils on them)")
    if isinstance(calib, dict):
        raise EdgesmithError("QAT fine-tunes single-input models only.", "use int8-qdq for this multi-input model.")
    return np.asarray(calib, np.float32), None, "calibration inputs (distillation)"


def calibrate(model: nn.Module, x: np.ndarray, config: QatBrevitasConfig) -> None:
    """Set the activation scales from up to 1024 inputs (brevitas calibration mode)."""
    from brevitas.graph.calibrate import calibration_mode

    xt = torch.from_numpy(x)
    model.eval()
    with torch.no_grad(), calibration_mode(model):
        for i in range(0, min(len(xt), 1024), config.batch):
            model(xt[i : i + config.batch])


def user_fine_tune(model: nn.Module, x: np.ndarray, config: QatBrevitasConfig, train_fn) -> dict:
    """Calibrate, then hand the quantized model to the user's ``train_fn(model)`` (it trains in place)."""
    seed_everything(config.seed)
    calibrate(model, x, config)
    model.train()
    try:
        train_fn(model)
    except EdgesmithError:
        raise
    except Exception as e:  # the user's code: name it, keep the first line of what it raised
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise EdgesmithError(f"your train_fn raised {type(e).__name__}: {first[:300]}",
                             "fix the training function (it gets the brevitas-quantized torch model and trains it "
                             "in place).") from None
    model.eval()
    name = getattr(train_fn, "__qualname__", type(train_fn).__name__)
    return {"loss": [], "objective": f"the user's train_fn ({name})"}


def fine_tune(model: nn.Module, teacher: nn.Module, x: np.ndarray, y: np.ndarray | None, config: QatBrevitasConfig,
              progress: bool = False) -> dict:
    """Calibrate the activation scales on ``x``, then ``config.epochs`` of Adam; returns a small history."""
    seed_everything(config.seed)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        target = teacher.eval()(xt[: min(len(xt), 4096)]) if y is None else None
        if y is None and len(xt) > 4096:
            target = torch.cat([teacher(xt[i : i + 4096]) for i in range(0, len(xt), 4096)])
    use_ce = y is not None and np.issubdtype(y.dtype, np.integer) and y.ndim == 1
    yt = torch.from_numpy(y.astype(np.int64)) if use_ce else None
    if y is not None and not use_ce:  # regression labels: fit them directly
        target = torch.from_numpy(np.asarray(y, np.float32))
    calibrate(model, x, config)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    gen = torch.Generator().manual_seed(config.seed)
    hist = {"loss": [], "objective": "cross-entropy on labels" if use_ce else "MSE to the float model's outputs"
            if y is None else "MSE to the labels"}
    from tqdm import tqdm

    model.train()
    for m in model.modules():  # normalization statistics stay as trained: QAT adapts weights, not the data stats
        if isinstance(m, nn.modules.batchnorm._BatchNorm) or isinstance(m, nn.Dropout):
            m.eval()
    for _ in tqdm(range(config.epochs), desc=config.kind, unit="epoch", disable=not progress or config.epochs < 2):
        perm = torch.randperm(len(xt), generator=gen)
        losses = []
        for i in range(0, len(xt), config.batch):
            idx = perm[i : i + config.batch]
            out = model(xt[idx])
            loss = nn.functional.cross_entropy(out, yt[idx]) if use_ce else \
                nn.functional.mse_loss(out, target[idx].reshape(out.shape))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        hist["loss"].append(float(np.mean(losses)))
    model.eval()
    return hist


def export_qcdq(model: nn.Module, example: np.ndarray, path, form: str = "qcdq", check: np.ndarray | None = None) -> dict:
    """brevitas QCDQ export with a dynamic batch; initializers kept out of the graph inputs. ``form="ort-integer"``
    lowers its Linear layers to MatMulIntegerToFloat and, on ``check`` inputs, measures how far the lowered
    graph's outputs are from the QCDQ graph's; returns what it did."""
    import io
    import warnings

    import onnx
    from brevitas.export import export_onnx_qcdq

    x = torch.from_numpy(np.ascontiguousarray(example, np.float32))
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export_onnx_qcdq(model.eval(), args=x, export_path=buf, input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                             dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}, opset_version=17,
                             dynamo=False)
    except Exception as e:  # the exporters raise many types; all mean "this model cannot be exported"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EdgesmithError(f"brevitas QCDQ export failed: {first[:300]}",
                             "keep the model to Linear/Conv layers and standard activations.") from None
    m = onnx.load_from_string(buf.getvalue())
    inits = {i.name for i in m.graph.initializer}
    for inp in [i for i in m.graph.input if i.name in inits]:
        m.graph.input.remove(inp)
    info = {"form": form}
    if form == "ort-integer":
        from edgesmith.compress.qcdq_integer import lower_gemms

        qcdq = m
        m, info["integer_gemms"] = lower_gemms(qcdq)
        if info["integer_gemms"] and check is not None:
            info.update(_lowering_gap(qcdq, m, np.asarray(check[:64], np.float32)))
    onnx.checker.check_model(m)
    with atomic_path(path, force=True) as tmp:
        onnx.save(m, str(tmp))
    return info


def _lowering_gap(qcdq, lowered, x: np.ndarray) -> dict:
    """Max |difference| between the QCDQ and the lowered graph's outputs, relative to the largest output, and
    how often their arg-max agrees (a rounding flipped at an inner quantizer moves an output by one step)."""
    from edgesmith.compress.onnx_analysis import capture_tensors, quiet_onnxruntime

    with quiet_onnxruntime():
        ref, low = (capture_tensors(m, [OUTPUT_NAME], x)[OUTPUT_NAME].reshape(len(x), -1) for m in (qcdq, lowered))
    return {"lowering_checked": len(x), "lowering_max_rel_diff": float(np.abs(ref - low).max() / max(float(np.abs(ref).max()), 1e-30)),
            "lowering_argmax_agreement": float(np.mean(ref.argmax(1) == low.argmax(1)))}


def layer_reports(original: nn.Module, model: nn.Module, layers: list[dict], table: list[dict]) -> list[LayerReport]:
    """Per quantized layer: weight SQNR of the exported integer weights against the float model's weights
    (rounding and fine-tuning together) and against the fine-tuned latent weights (rounding alone), and the
    sensitivity table's output SQNR when there is one."""
    from edgesmith.compress.onnx_analysis import report_db, sqnr_db

    before = dict(original.named_modules())
    after = dict(model.named_modules())
    sens = {r["layer"]: r for r in table}
    out = []
    with torch.no_grad():
        for layer in layers:
            q = after[layer["name"]]
            w_int = q.quant_weight().value.detach().double().numpy()
            err = {"weight_sqnr_db": report_db(sqnr_db(before[layer["name"]].weight.detach().double().numpy(), w_int)),
                   "rounding_sqnr_db": report_db(sqnr_db(q.weight.detach().double().numpy(), w_int))}
            if layer["name"] in sens:
                err["output_sqnr_db_alone"] = report_db(sens[layer["name"]]["sqnr_db"])
            out.append(LayerReport(layer["name"], "quantized", float(layer["weight_bits"]), layer["params"], err,
                                   f"brevitas {layer['type']}, per-channel {layer['weight_bits']}-bit weights"))
    return out


def _lowering_notes(info: dict) -> list[str]:
    if info["form"] != "ort-integer":
        return []
    if not info["integer_gemms"]:
        return ["ort-integer: no Linear layer in the QCDQ form it lowers (left as QCDQ)"]
    gap = (f"; vs the QCDQ graph on {info['lowering_checked']} training inputs: max |diff| "
           f"{info['lowering_max_rel_diff']:.1e} of the largest output, arg-max agrees on "
           f"{100 * info['lowering_argmax_agreement']:.1f}% (measured)") if "lowering_max_rel_diff" in info else ""
    return [f"ort-integer: {info['integer_gemms']} Linear layer(s) lowered to MatMulIntegerToFloat (u8 x u8, int32 "
            f"sums){gap}"]


def _qat(artifact: Artifact, config: QatBrevitasConfig, ctx: PassContext) -> PassResult:
    if not isinstance(artifact.module, nn.Module):
        raise EdgesmithError(f"{config.kind} fine-tunes a torch model; this one is {artifact.format}.",
                             "deploy the torch model (a producer or a torch file), not its ONNX export.")
    if ctx.example_input is None:
        raise EdgesmithError(f"{config.kind} needs an example input to fix the exported shapes.",
                             "pass the producer's example input.")
    x, y, source = _training_arrays(ctx)
    t0 = time.perf_counter()
    table, sensitivity_note = [], []
    if config.keep_8bit and config.weight_bits < 8:
        import dataclasses

        table = layer_sensitivity(artifact.module, x, config)
        keep = {r["layer"]: 8 for r in table[: config.keep_8bit]}
        config = dataclasses.replace(config, layer_bits={**keep, **config.layer_bits})
        sensitivity_note = [f"sensitivity ({len(table)} layers, each alone at {table[0]['bits']} bits, the rest at 8; "
                            f"output SQNR vs fp32): kept at 8 bits " + ", ".join(
                                f"{r['layer']} ({r['sqnr_db']:.1f} dB)" for r in table[: config.keep_8bit])
                            + (f"; next {table[config.keep_8bit]['layer']} ({table[config.keep_8bit]['sqnr_db']:.1f} dB)"
                               if len(table) > config.keep_8bit else "")]
    model, layers = quantized_copy(artifact.module, config)
    if ctx.train_fn is not None:
        hist = user_fine_tune(model, x, config, ctx.train_fn)
    else:
        hist = fine_tune(model, artifact.module, x, y, config, progress=ctx.progress)
    seconds = time.perf_counter() - t0
    out = ctx.workdir / f"model.{config.kind}.onnx"
    lowering = export_qcdq(model, ctx.example_input, out, config.form, check=x)
    new = Artifact("onnx", path=out, meta={**artifact.meta, "input_name": INPUT_NAME, "output_name": OUTPUT_NAME,
                                            "input_shape": list(ctx.example_input.shape[1:]),
                                            "precision": f"w{config.weight_bits}a{config.act_bits} (brevitas QAT)"})
    quantized = sum(layer["params"] for layer in layers)
    bits = sum(layer["params"] * layer["weight_bits"] for layer in layers) / max(1, quantized)
    report = PassReport(config.to_dict(), "torch", "onnx", artifact.size_bytes(), new.size_bytes(), bits_per_weight=bits,
                        layers=layer_reports(artifact.module, model, layers, table),
                        notes=[f"{len(layers)} layer(s) as brevitas QuantLinear/QuantConv, per-channel weights "
                               f"({bits:.2f} bits on average), inputs {config.act_bits}-bit per tensor",
                               (f"activation scales calibrated on {len(x)} {source}, then fine-tuned by "
                                f"{hist['objective']} in {seconds:.1f} s (measured wall time, calibration included)"
                                if ctx.train_fn is not None else
                                f"fine-tuned {config.epochs} epoch(s) on {len(x)} {source} ({hist['objective']}) in "
                                f"{seconds:.1f} s (measured wall time, calibration included)"),
                               "QCDQ ONNX: 4-bit weights are stored as int8 (no packed int4 in QCDQ)"]
                        + _lowering_notes(lowering) + sensitivity_note,
                        extra={"sensitivity": table, "fine_tune_s": seconds, "loss": hist["loss"], "layers": layers, "objective": hist["objective"],
                               "export": lowering})
    return PassResult(new, report)


for _cls in (QatBrevitasConfig, QatW8A8Config, QatW4A8Config):
    register_pass(_cls)(_qat)
