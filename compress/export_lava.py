"""Export a Linear/ReLU torch MLP to a fixed-point Sigma-Delta network for Loihi 2 (Lava).

The network is ``(Dense|Sparse -> SigmaDelta) * L``: one connection process and one Sigma-Delta
neuron layer per ``nn.Linear``; a Linear followed by ReLU gets ``act_mode=RELU``, the others (the
output layer) ``act_mode=UNIT`` (identity), which Lava's ``SigmaDelta`` supports. Graded spikes of
``activation_bits`` carry activation deltas, so each neuron sends one message per input change.

Fixed-point mapping (what Lava's fixed-point models do, see ``runtimes/sigma_delta_ref.py``):

* weights: per-layer symmetric 8-bit, ``q = clip(round(W / s_w), -127, 127)`` with
  ``s_w = max|W| / 127`` (the scale comes from the weights alone). Lava's mixed-sign 8-bit synapses
  hold even integers in [-256, 254] (the lowest bit is dropped), so the Lava processes get ``2 q``:
  exact in every sign mode. The integer accumulator is ``(2 q . s) >> -weight_exp``.
* activations: layer ``l`` holds integers in units ``S_l = (s_w / 2) * S_{l-1} * 2**-weight_exp``;
  ``weight_exp`` is the smallest right shift that keeps the calibration data's largest activation
  (positive part for ReLU layers, magnitude for linear ones) at most ``2**(activation_bits - 2)``:
  one bit of headroom for unseen inputs plus the sign bit of the graded spike.
* input: ``x_int = clip(round(x / S_in))`` with ``S_in = max|x_cal| / 2**(activation_bits - 2)``.
* bias: ``round(b / S_l)``, clipped to the 16-bit range of the SigmaDelta bias.
* output: ``y = act_out * S_{L-1}`` (``output_scale``).

The description is saved as ``model.lava.npz`` (schema below, ``SCHEMA_VERSION``); the Lava worker
(a Python 3.10 script without edgesmith) and the NumPy reference both read it.

npz schema (all arrays; scalars are 0-d):
    format "edgesmith-lava-sdn", schema_version 1, n_layers L, weight_bits, activation_bits,
    input_scale, output_scale, timesteps_per_sample,
    layer_names (L,) str, sparse (L,) bool, relu (L,) bool, weight_exp (L,) int32,
    vth (L,) int32, spike_exp (L,) int32, state_exp (L,) int32, cum_error (L,) bool,
    weight_scale (L,) float64 (s_w), act_scale (L,) float64 (S_l),
    weights_{i} (out, in) int8 (q; Lava gets 2q), bias_{i} (out,) int32.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from torch import nn

from edgesmith.compress.base import Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.common import EdgesmithError, atomic_path

FORMAT_NAME = "edgesmith-lava-sdn"
SCHEMA_VERSION = 1
BIAS_BITS = 16  # SigmaDelta's fixed-point bias Var is 16 bits wide
LAVA_WEIGHT_FACTOR = 2  # mixed-sign 8-bit Lava synapses are even integers: q -> 2 q


@dataclass
class ExportLavaConfig(PassConfig):
    """Options of the torch -> Lava Sigma-Delta export.

    ``steps_per_sample`` None means the minimum window, ``n_layers + 1`` steps (one step of delay
    per Dense/Sparse plus the step the input is presented on). ``sparse_threshold`` is the fraction
    of zero quantized weights above which a layer uses a ``Sparse`` connection.
    """

    kind: ClassVar[str] = "export-lava"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "lava"

    weight_bits: int = 8
    activation_bits: int = 16
    vth: int = 0
    steps_per_sample: int | None = None
    sparse_threshold: float = 0.5

    def validate(self) -> None:
        if self.weight_bits != 8:
            self._fail("weight_bits", f"is {self.weight_bits}", "use 8: Lava's fixed-point synapses hold 8-bit weights.")
        if not 4 <= self.activation_bits <= 24:
            self._fail("activation_bits", f"is {self.activation_bits}",
                       "use 4..24 (graded spike payload; 16 is the default, 24 is the neuron state width).")
        if not isinstance(self.vth, int) or self.vth < 0:
            self._fail("vth", f"is {self.vth!r}", "use a non-negative integer threshold (0 sends every change).")
        if self.steps_per_sample is not None and (not isinstance(self.steps_per_sample, int)
                                                  or self.steps_per_sample < 2):
            self._fail("steps_per_sample", f"is {self.steps_per_sample!r}",
                       "use an integer >= n_layers + 1, or leave it unset for the minimum.")
        if not 0.0 <= self.sparse_threshold <= 1.0:
            self._fail("sparse_threshold", f"is {self.sparse_threshold}", "use a fraction between 0 and 1.")


@dataclass
class _Layer:
    name: str
    linear: nn.Linear
    relu: bool


def linear_relu_layers(module: nn.Module) -> list[_Layer]:
    """The module's Linear layers, each with whether a ReLU follows; reject anything else."""
    leaves: list[tuple[str, nn.Module]] = []

    def walk(prefix: str, m: nn.Module) -> None:
        if isinstance(m, nn.Sequential):
            for name, child in m.named_children():
                walk(f"{prefix}.{name}" if prefix else name, child)
        elif isinstance(m, (nn.Linear, nn.ReLU, nn.Identity, nn.Flatten)):
            leaves.append((prefix or type(m).__name__, m))
        else:
            raise EdgesmithError(
                f"export-lava cannot map layer {prefix or '<root>'!r} ({type(m).__name__}) to a Sigma-Delta network.",
                "use an nn.Sequential of Linear, ReLU, Identity and Flatten layers only.",
            )

    walk("", module)
    layers: list[_Layer] = []
    for name, m in leaves:
        if isinstance(m, nn.Linear):
            layers.append(_Layer(name, m, relu=False))
        elif isinstance(m, nn.ReLU):
            if not layers:
                raise EdgesmithError(f"export-lava: ReLU {name!r} comes before any Linear layer.",
                                     "apply that ReLU to the inputs before the model, or remove it.")
            layers[-1].relu = True
        elif isinstance(m, nn.Flatten) and layers:
            pass  # the network is already flat after a Linear
    if not layers:
        raise EdgesmithError("export-lava found no Linear layer in the model.", "export a model with Linear layers.")
    return layers


def quantize_weights(w: np.ndarray, bits: int = 8) -> tuple[np.ndarray, float]:
    """Symmetric per-layer quantization: ``q = clip(round(w / s), -qmax, qmax)``, ``s = max|w| / qmax``."""
    qmax = 2 ** (bits - 1) - 1
    peak = float(np.max(np.abs(w))) if w.size else 0.0
    scale = peak / qmax if peak > 0 else 1.0
    q = np.clip(np.rint(w / scale), -qmax, qmax).astype(np.int8)
    return q, scale


def sqnr_db(ref: np.ndarray, approx: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio in dB (inf when exact)."""
    noise = float(np.sum((np.asarray(ref, np.float64) - approx) ** 2))
    signal = float(np.sum(np.asarray(ref, np.float64) ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-300) / noise)


def _shift_for(peak: float, unit: float, target: float) -> int:
    """Smallest right shift k >= 0 with peak / (unit * 2**k) <= target."""
    if peak <= 0.0 or unit <= 0.0:
        return 0
    return max(0, math.ceil(math.log2(peak / (unit * target)) - 1e-12))


def build_lava_network(module: nn.Module, calibration: np.ndarray, config: ExportLavaConfig) -> tuple[dict, list[LayerReport], list[str]]:
    """The npz arrays of the fixed-point network, per-layer reports and notes."""
    layers = linear_relu_layers(module)
    x = np.asarray(calibration, np.float64).reshape(len(calibration), -1)
    target = float(2 ** (config.activation_bits - 2))
    peak_in = float(np.max(np.abs(x)))
    input_scale = peak_in / target if peak_in > 0 else 1.0
    steps = config.steps_per_sample if config.steps_per_sample is not None else len(layers) + 1
    if steps < len(layers) + 1:
        raise EdgesmithError(
            f"export-lava: steps_per_sample {steps} is shorter than the network's delay ({len(layers)} layers).",
            f"use steps_per_sample >= {len(layers) + 1} or leave it unset.",
        )
    arrays: dict[str, np.ndarray] = {}
    reports: list[LayerReport] = []
    notes: list[str] = []
    per = {k: [] for k in ("sparse", "relu", "weight_exp", "weight_scale", "act_scale", "names")}
    bias_lim = 2 ** (BIAS_BITS - 1) - 1
    prev_scale, y = input_scale, x
    for i, layer in enumerate(layers):
        w = layer.linear.weight.detach().double().numpy()
        b = (layer.linear.bias.detach().double().numpy() if layer.linear.bias is not None
             else np.zeros(w.shape[0]))
        if w.shape[1] != y.shape[1]:
            raise EdgesmithError(f"export-lava: layer {layer.name!r} expects {w.shape[1]} inputs but gets {y.shape[1]}.",
                                 "check that the calibration data matches the model's input size.")
        q, s_w = quantize_weights(w, config.weight_bits)
        z = y @ w.T + b
        peak = float(np.max(np.maximum(z, 0.0))) if layer.relu else float(np.max(np.abs(z)))
        unit = s_w / LAVA_WEIGHT_FACTOR * prev_scale
        shift = _shift_for(peak, unit, target)
        act_scale = unit * 2.0 ** shift
        b_int = np.rint(b / act_scale)
        if np.any(np.abs(b_int) > bias_lim):
            notes.append(f"{layer.name}: {int(np.sum(np.abs(b_int) > bias_lim))} biases clipped to {BIAS_BITS} bits.")
        b_int = np.clip(b_int, -bias_lim, bias_lim).astype(np.int32)
        fan_in = w.shape[1]
        if LAVA_WEIGHT_FACTOR * 127 * 2 ** (config.activation_bits - 1) * fan_in >= 2 ** 31:
            notes.append(f"{layer.name}: a worst-case accumulation ({fan_in} inputs) could exceed int32; "
                         "the reference reports an overflow if it happens.")
        zero_frac = float(np.mean(q == 0))
        sparse = zero_frac > config.sparse_threshold
        arrays[f"weights_{i}"] = q
        arrays[f"bias_{i}"] = b_int
        per["sparse"].append(sparse)
        per["relu"].append(layer.relu)
        per["weight_exp"].append(-shift)
        per["weight_scale"].append(s_w)
        per["act_scale"].append(act_scale)
        per["names"].append(layer.name)
        reports.append(LayerReport(
            name=layer.name, action="quantized", bits_per_weight=float(config.weight_bits), n_params=int(w.size),
            error={"weight_sqnr_db": sqnr_db(w, q.astype(np.float64) * s_w),
                   "bias_sqnr_db": sqnr_db(b, b_int * act_scale), "zero_fraction": zero_frac},
            reason=f"{'sparse' if sparse else 'dense'}, weight_exp {-shift}, act {'relu' if layer.relu else 'unit'}",
        ))
        y = np.maximum(z, 0.0) if layer.relu else z
        prev_scale = act_scale
    n = len(layers)
    arrays.update(
        format=np.array(FORMAT_NAME), schema_version=np.array(SCHEMA_VERSION), n_layers=np.array(n),
        weight_bits=np.array(config.weight_bits), activation_bits=np.array(config.activation_bits),
        input_scale=np.array(input_scale), output_scale=np.array(prev_scale), timesteps_per_sample=np.array(steps),
        layer_names=np.array(per["names"]), sparse=np.array(per["sparse"], bool), relu=np.array(per["relu"], bool),
        weight_exp=np.array(per["weight_exp"], np.int32), vth=np.full(n, config.vth, np.int32),
        spike_exp=np.zeros(n, np.int32), state_exp=np.zeros(n, np.int32), cum_error=np.zeros(n, bool),
        weight_scale=np.array(per["weight_scale"]), act_scale=np.array(per["act_scale"]),
    )
    return arrays, reports, notes


def save_lava_npz(arrays: dict, path: Path) -> None:
    """Write the network description atomically (replacing an earlier export in the work folder)."""
    with atomic_path(path, force=True) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


@register_pass(ExportLavaConfig)
def _export_lava(artifact: Artifact, config: ExportLavaConfig, ctx: PassContext) -> PassResult:
    calib = ctx.calibration_checked("calibration data (sets the activation scales)")
    arrays, layer_reports, notes = build_lava_network(artifact.module, calib, config)
    out = ctx.workdir / "model.lava.npz"
    save_lava_npz(arrays, out)
    input_shape = artifact.meta.get("input_shape") or list(np.asarray(calib).shape[1:])
    new = Artifact("lava", path=out, meta={**artifact.meta, "input_shape": list(input_shape), "precision": "fixed",
                                            "n_layers": int(arrays["n_layers"]),
                                            "timesteps_per_sample": int(arrays["timesteps_per_sample"])})
    n_w = sum(r.n_params for r in layer_reports)
    report = PassReport(config.to_dict(), "torch", "lava", artifact.size_bytes(), new.size_bytes(),
                        bits_per_weight=float(config.weight_bits) if n_w else None, layers=layer_reports,
                        notes=notes + ["Lava synapses get 2*q (even 8-bit mixed-sign weights), so no weight bit is lost.",
                                       "Sigma-Delta state carries over between samples: each weight_exp right shift "
                                       "floors, so outputs drift by up to 1 LSB per layer and sample."],
                        extra={"input_scale": float(arrays["input_scale"]), "output_scale": float(arrays["output_scale"]),
                               "weight_exp": arrays["weight_exp"].tolist(), "sparse": arrays["sparse"].tolist(),
                               "timesteps_per_sample": int(arrays["timesteps_per_sample"])})
    return PassResult(new, report)
