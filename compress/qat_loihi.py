"""``qat-w8-loihi``: brevitas QAT of a Linear/ReLU MLP on the fixed-point grid the loihi2 conversion will use.

``export-netx`` turns a float MLP into Loihi 2 integers: the input as x_int = round(x / S_in) and each dense
layer's weights as q = round(W / s_l) in [-127, 127], where s_l is the smallest scale that fits the weights
in 8 bits, the layer's calibration peak in the 24-bit neuron state and 16-bit messages, and its biases in 16
bits. On digits-mlp the state/message bound, not the weights, sets two of the three scales, so a QAT that
only learns 8-bit weights at max |w| / 127 is rounded again by the conversion.

This pass first runs the conversion's own scale search on the float model (same calibration data), then
fine-tunes under exactly those scales: a brevitas ``QuantIdentity`` with the constant scale S_in on the
input, and each Linear a ``QuantLinear`` with 8-bit narrow-range weights at the constant scale s_l (no
other input quantizer: the messages between layers carry 14+ bits). After ``epochs`` (cross-entropy on
labels, or distillation to the float model, as ``qat-w8a8``) it returns the float MLP whose weights are the
learned grid values q * s_l and records the s_l in ``meta["learned_weight_scales"]``; ``export-netx`` takes
them as lower bounds of its scales, so every layer whose bounds still hold stores exactly the learned
integers (its notes say how many).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass

INPUT_BITS = 16  # wide enough that the input quantizer never clips what the conversion's 24-bit encoder sends


@dataclass
class QatLoihiConfig(PassConfig):
    """``epochs`` of fine-tuning at ``lr`` in batches of ``batch`` on the conversion's fixed-point grid."""

    kind: ClassVar[str] = "qat-w8-loihi"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "torch"

    epochs: int = 3
    lr: float = 1e-4
    batch: int = 64
    seed: int = 0

    def validate(self) -> None:
        from edgesmith.compress.qat_brevitas import check_training_fields

        check_training_fields(self, "0: the conversion's rounded weights, no training")


def _on_grid(module: nn.Module, input_scale: float, scales: list[float]) -> nn.Module:
    """brevitas twin of the MLP: constant-scale input quantizer, constant-scale 8-bit weights per layer."""
    import brevitas.nn as qnn
    from brevitas.inject.enum import ScalingImplType
    from brevitas.quant import Int8ActPerTensorFloat, Int8WeightPerTensorFloat

    from edgesmith.compress.qat_brevitas import copy_parameters, swap_layers

    model = copy.deepcopy(module).float()
    todo = iter(scales)

    def twin(name: str, child: nn.Linear) -> nn.Module:
        s = next(todo)  # named_children walks the layers in the order the conversion listed them
        return copy_parameters(qnn.QuantLinear(
            child.in_features, child.out_features, bias=child.bias is not None, weight_quant=Int8WeightPerTensorFloat,
            weight_bit_width=8, weight_narrow_range=True, weight_scaling_impl_type=ScalingImplType.CONST,
            weight_scaling_const=s * 127.0, input_quant=None, return_quant_tensor=False), child)

    swap_layers(model, (nn.Linear,), twin)
    top = input_scale * (2 ** (INPUT_BITS - 1) - 1)
    quant_in = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, bit_width=INPUT_BITS,
                                 scaling_impl_type=ScalingImplType.CONST, scaling_const=top, max_val=top, min_val=-top,
                                 return_quant_tensor=False)
    return nn.Sequential(quant_in, model)


def _learned_float(module: nn.Module, trained: nn.Module, scales: list[float]) -> tuple[nn.Module, list[dict]]:
    """A copy of the float ``module`` whose weights are the trained integers times their layer's scale."""
    import brevitas.nn as qnn

    out = copy.deepcopy(module).float().eval()
    floats = [m for m in out.modules() if isinstance(m, nn.Linear)]
    quant = [m for m in trained.modules() if isinstance(m, qnn.QuantLinear)]
    layers = []
    with torch.no_grad():
        for f, q, s in zip(floats, quant, scales):
            ints = torch.clamp(torch.round(q.weight.detach().double() / s), -127, 127)
            f.weight.copy_((ints * s).float())
            if q.bias is not None:
                f.bias.copy_(q.bias.detach())
            layers.append({"scale": s, "min_int": int(ints.min()), "max_int": int(ints.max())})
    return out, layers


@register_pass(QatLoihiConfig)
def _qat_loihi(artifact: Artifact, config: QatLoihiConfig, ctx: PassContext) -> PassResult:
    from edgesmith.compress.export_netx import ExportNetxConfig, choose_network
    from edgesmith.compress.qat_brevitas import _training_arrays, fine_tune

    if not isinstance(artifact.module, nn.Module):
        raise EdgesmithError(f"{config.kind} fine-tunes a torch model; this one is {artifact.format}.",
                             "deploy the torch model (a producer or path/to/file.py:factory).")
    calib = ctx.calibration_checked("calibration data (the conversion's scales are searched on it)")
    _, _, cand, _, db, _ = choose_network(artifact.module, calib, ExportNetxConfig())
    x, y, source = _training_arrays(ctx)
    t0 = time.perf_counter()
    trained = _on_grid(artifact.module, cand.input_scale, cand.scales)
    hist = fine_tune(trained, artifact.module, x, y, config, progress=ctx.progress)
    seconds = time.perf_counter() - t0
    module, layers = _learned_float(artifact.module, trained, cand.scales)
    meta = {**artifact.meta, "learned_weight_scales": [float(s) for s in cand.scales],
            "learned_input_scale": cand.input_scale}
    new = Artifact("torch", module=module, meta=meta)
    report = PassReport(config.to_dict(), "torch", "torch", artifact.size_bytes(), new.size_bytes(), bits_per_weight=8.0,
                        notes=[f"the conversion's grid: input scale {cand.input_scale:g}, per-layer weight scales "
                               + ", ".join(f"{s:.3g}" for s in cand.scales) + f" (float model: {db:.1f} dB calibration "
                               "output SQNR)",
                               f"{len(layers)} Linear layer(s) fine-tuned on it with brevitas (constant-scale 8-bit "
                               f"weights and input quantizer) for {config.epochs} epoch(s) on {len(x)} {source} "
                               f"({hist['objective']}) in {seconds:.1f} s (measured)"],
                        extra={"fine_tune_s": seconds, "loss": hist["loss"], "layers": layers,
                               "objective": hist["objective"], "input_scale": cand.input_scale})
    return PassResult(new, report)


def learned_integers_kept(meta: dict, scales: list[float]) -> list[bool] | None:
    """Per layer: did the conversion keep the learned scale (and so store the learned integers)?"""
    learned = meta.get("learned_weight_scales")
    if not learned or len(learned) != len(scales):
        return None
    return [bool(np.isclose(a, b, rtol=1e-9, atol=0.0)) for a, b in zip(learned, scales)]
