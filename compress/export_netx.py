"""Export a Linear/ReLU torch MLP as a netx HDF5 Sigma-Delta network (lava-dl's exchange format).

The file is what lava-dl's ``export_hdf5`` writes for a ``slayer.block.sigma_delta`` network, so
``lava.lib.dl.netx.hdf5.Network`` loads it, and the toolkit's Lava runtime runs it that way:

* ``layer/0``: ``input`` with an SDNN neuron (a Delta encoder, vThMant 0) and a 1-D shape;
* one ``dense`` layer per ``nn.Linear``: integer weights (out, in) and biases, SDNN neuron
  (``vThMant``). Hidden layers must be followed by ReLU (netx's Sigma-Delta neurons are ReLU).
  A last Linear without ReLU becomes lava-dl's Sigma output layer (``neuron/sigma_output``): netx
  cannot give it a bias, so its bias is added on the host and stored in the ``edgesmith`` group;
* ``edgesmith`` (ignored by netx): ``input_scale``, ``output_scale``, ``output_bias``,
  ``timesteps_per_sample``, ``layer_names``, ``weight_scale``.

Fixed-point mapping (netx's arithmetic, see ``compress/netx_format.py``): messages into layer l carry
``m`` in units ``M_{l-1}``; the layer accumulates ``sigma += q . m`` (units ``U_l = s_l M_{l-1}``, with
``q = round(W / s_l)`` in [-127, 127]), adds ``bias << 12``, applies ReLU and sends ``act >> 6``, so
``M_l = 64 U_l``. The input encoder sends ``64 * x_int`` with ``x_int = round(x / S_in)``, so
``M_0 = S_in / 64``. Per layer ``s_l`` is the smallest scale that holds the weights in 8 bits, the
calibration peak of ``sigma`` under ``2**20`` (messages then stay within netx's 16-bit payload with a
bit of headroom; ``2**22`` for a Sigma output layer, inside the 24-bit state) and the biases in 16
bits. The one free choice is the input scale ``S_in``, a power of two: a fine input scale leaves
later layers less room for their weights. The pass tries each power of two from the finest the
24-bit encoder allows to 2**12 times coarser, runs the bit-exact reference on the calibration data
and keeps the one whose outputs are closest to the float model (output SQNR).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.compress.base import (
    Artifact,
    LayerReport,
    PassConfig,
    PassContext,
    PassReport,
    PassResult,
    register_pass,
)
from edgesmith.compress.netx_format import (
    NetxLayer,
    NetxNet,
    descale,
    netx_weights,
    put,
    quantize_inputs,
    simulate,
    start_netx,
)
from edgesmith.compress.onnx_analysis import report_db, sqnr_db
from torch import nn

FORMAT_VERSION = 1
SIGMA_PEAK = 2 ** 20  # hidden layers: act >> 6 then stays below 2**14, one bit under the 16-bit payload's range
OUTPUT_SIGMA_PEAK = 2 ** 22  # a Sigma output layer sends nothing on: one bit under the 24-bit state
BIAS_LIMIT = 2 ** 15 - 1
N_SEARCH_SAMPLES = 256
QAT_PEAK_SLACK = 1.25  # how far a QAT-trained layer's peak may pass the cap before its trained scale is given up
INPUT_SHIFTS = 13  # input scales tried: the finest allowed, and up to 2**12 times coarser


@dataclass
class ExportNetxConfig(PassConfig):
    """Options of the torch -> netx Sigma-Delta export.

    ``vth`` is every Sigma-Delta layer's threshold mantissa (Lava uses ``vth << 12``; 0 sends every
    change). ``steps_per_sample`` None means the minimum window, ``n_layers + 1`` steps (one step of
    delay per dense layer plus the step the input arrives on).
    """

    kind: ClassVar[str] = "export-netx"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "netx"

    vth: int = 0
    steps_per_sample: int | None = None

    def validate(self) -> None:
        if not isinstance(self.vth, int) or isinstance(self.vth, bool) or not 0 <= self.vth < 2 ** 11:
            self._fail("vth", f"is {self.vth!r}", "use an integer threshold mantissa in 0..2047 (0 sends every change).")
        if self.steps_per_sample is not None and (not isinstance(self.steps_per_sample, int)
                                                  or self.steps_per_sample < 2):
            self._fail("steps_per_sample", f"is {self.steps_per_sample!r}",
                       "use an integer >= n_layers + 1, or leave it unset for the minimum.")


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
                f"export-netx cannot map layer {prefix or '<root>'!r} ({type(m).__name__}) to a Sigma-Delta network.",
                "use an nn.Sequential of Linear, ReLU, Identity and Flatten layers only.",
            )

    walk("", module)
    layers: list[_Layer] = []
    for name, m in leaves:
        if isinstance(m, nn.Linear):
            layers.append(_Layer(name, m, relu=False))
        elif isinstance(m, nn.ReLU):
            if not layers:
                raise EdgesmithError(f"export-netx: ReLU {name!r} comes before any Linear layer.",
                                     "apply that ReLU to the inputs before the model, or remove it.")
            layers[-1].relu = True
    if not layers:
        raise EdgesmithError("export-netx found no Linear layer in the model.", "export a model with Linear layers.")
    linear_hidden = [lyr.name for lyr in layers[:-1] if not lyr.relu]
    if linear_hidden:
        raise EdgesmithError(f"export-netx: hidden layer(s) {', '.join(linear_hidden)} have no ReLU after them, but "
                             "netx's Sigma-Delta neurons are ReLU neurons.",
                             "put a ReLU after every Linear but the last (or fold consecutive Linears into one).")
    return layers


@dataclass
class _Float:
    w: np.ndarray
    b: np.ndarray
    relu: bool
    peak: float  # calibration peak of |sigma| and |sigma + b| (real units)


def _float_layers(layers: list[_Layer], x: np.ndarray) -> tuple[list[_Float], np.ndarray]:
    out, y = [], x
    for lyr in layers:
        w = lyr.linear.weight.detach().double().numpy()
        b = (lyr.linear.bias.detach().double().numpy() if lyr.linear.bias is not None else np.zeros(w.shape[0]))
        if w.shape[1] != y.shape[1]:
            raise EdgesmithError(f"export-netx: layer {lyr.name!r} expects {w.shape[1]} inputs but gets {y.shape[1]}.",
                                 "check that the calibration data matches the model's input size.")
        pre = y @ w.T
        peak = float(max(np.abs(pre).max(initial=0.0), np.abs(pre + b).max(initial=0.0)))
        out.append(_Float(w, b, lyr.relu, peak))
        y = np.maximum(pre + b, 0.0) if lyr.relu else pre + b
    return out, y


@dataclass
class _Candidate:
    input_scale: float
    weights: list[np.ndarray]
    biases: list[np.ndarray]  # int; the last layer's is empty when it is a Sigma output
    scales: list[float]  # s_l
    output_scale: float
    output_bias: np.ndarray


def _candidate(fl: list[_Float], input_scale: float, floor: list[float] | None = None) -> _Candidate:
    msg_unit = input_scale / 64.0  # M_0
    weights, biases, scales = [], [], []
    out_scale = 0.0
    for i, f in enumerate(fl):
        last_sigma = i == len(fl) - 1 and not f.relu
        cap = OUTPUT_SIGMA_PEAK if last_sigma else SIGMA_PEAK
        wmax = float(np.abs(f.w).max(initial=0.0))
        bmax = 0.0 if last_sigma else float(np.abs(f.b).max(initial=0.0))
        s = max(wmax / 127.0, f.peak / (cap * msg_unit), bmax / (BIAS_LIMIT * (1 << 12) * msg_unit), 1e-300)
        if floor and floor[i] >= max(wmax / 127.0, f.peak / (QAT_PEAK_SLACK * cap * msg_unit)):
            # the scale QAT trained on: kept while the peak (moved a little by the training) stays within a
            # quarter above the cap, which is a bit under the true limit; the bit-exact simulation below still
            # rejects any candidate that overflows on the calibration data
            s = max(floor[i], bmax / (BIAS_LIMIT * (1 << 12) * msg_unit), 1e-300)
        q = np.clip(np.rint(f.w / s), -127, 127).astype(np.int64)
        unit = s * msg_unit  # U_l
        b = np.zeros(0, np.int64) if last_sigma else np.clip(np.rint(f.b / (unit * (1 << 12))), -BIAS_LIMIT,
                                                               BIAS_LIMIT).astype(np.int64)
        weights.append(q), biases.append(b), scales.append(s)
        out_scale = unit if last_sigma else 64.0 * unit
        msg_unit = 64.0 * unit
    out_bias = fl[-1].b.copy() if not fl[-1].relu else np.zeros(fl[-1].w.shape[0])
    return _Candidate(input_scale, weights, biases, scales, out_scale, out_bias)


def _net_of(c: _Candidate, fl: list[_Float], vth: int, steps: int):
    layers = []
    for i, (q, b, f) in enumerate(zip(c.weights, c.biases, fl)):
        sigma_out = i == len(fl) - 1 and not f.relu
        if not np.any(q):
            raise EdgesmithError(f"export-netx: layer {i} quantizes to all-zero weights.",
                                 "check the model's weights (netx cannot load an all-zero layer).")
        lw, e, nb = netx_weights(q)
        layers.append(NetxLayer(f"layer{i + 1}", q, lw, e, nb, b if b.size else np.zeros(q.shape[0], np.int64),
                                0 if sigma_out else vth, sigma_out))
    return NetxNet(layers=layers, n_inputs=int(fl[0].w.shape[1]), input_vth=0, input_weight=1.0 / c.input_scale,
                   input_bias=0.0, output_scale=c.output_scale, output_bias=c.output_bias, steps_per_sample=steps,
                   has_input_layer=True)


def _score(net, x: np.ndarray, ref: np.ndarray) -> tuple[float, dict]:
    """Output SQNR of the fixed-point network on the calibration samples, run one after another as the runtime does."""
    res = simulate(net, quantize_inputs(net, x))
    out = descale(net, res.outputs)
    return sqnr_db(ref, out), res.stats


def choose_network(module: nn.Module, calibration: np.ndarray, config: ExportNetxConfig, floor: list | None = None,
                   input_scale: float | None = None):
    """The fixed-point network with the best calibration output SQNR, its score, and the search's table.
    ``floor`` and ``input_scale``: the grid a QAT pass trained on (``qat-w8-loihi``): that input scale is tried
    alone first, and each layer keeps its trained weight scale where the weights and peak still fit it."""
    layers = linear_relu_layers(module)
    x = np.asarray(calibration, np.float64).reshape(len(calibration), -1)
    fl, ref = _float_layers(layers, x)
    steps = config.steps_per_sample if config.steps_per_sample is not None else len(layers) + 1
    if steps < len(layers) + 1:
        raise EdgesmithError(f"export-netx: steps_per_sample {steps} is shorter than the network's delay "
                             f"({len(layers)} dense layers).", f"use steps_per_sample >= {len(layers) + 1} or leave it unset.")
    peak_x = float(np.abs(x).max(initial=0.0))
    finest = 2.0 ** math.ceil(math.log2(peak_x / 1024.0)) if peak_x > 0 else 1.0  # |x_int| <= 1024: a bit of headroom
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(len(x), size=min(len(x), N_SEARCH_SAMPLES), replace=False))
    xs, rs = x[pick], ref[pick]
    best, table = None, []
    trained = [input_scale] if input_scale else []
    for i, scale in enumerate(trained + [finest * 2.0 ** k for k in range(INPUT_SHIFTS)]):
        if i == 1 and trained and best is not None:
            break  # the trained input scale fits: it is the one the weights were learned for
        cand = _candidate(fl, scale, floor)
        net = _net_of(cand, fl, config.vth, steps)
        db, stats = _score(net, xs, rs)
        ok = not any(stats["overflow"].values())
        table.append({"input_scale": cand.input_scale, "output_sqnr_db": report_db(db), "fits": ok,
                      "weight_bits": [int(np.ceil(np.log2(np.abs(q).max() + 1))) + 1 for q in cand.weights]})
        if ok and (best is None or db > best[2]):
            best = (cand, net, db)
    if best is None:
        raise EdgesmithError("export-netx: no input scale keeps the network inside Loihi 2's 24-bit neuron state "
                             "and netx's 16-bit messages on the calibration data.",
                             "check the calibration data for outliers, or shrink the model's activations.")
    cand, net, db = best
    return layers, fl, cand, net, db, table


def write_netx(path: Path, cand: _Candidate, layers: list[_Layer], fl: list[_Float], net) -> None:
    """The netx HDF5 file (lava-dl's layout) plus the ``edgesmith`` group, written atomically."""
    import h5py

    with atomic_path(path, force=True) as tmp:
        with h5py.File(tmp, "w") as f:
            lg, g = start_netx(f, fl[0].w.shape[1])
            inv = 1.0 / cand.input_scale
            if inv >= 1 and inv == round(inv):  # netx reads the input transform as integers
                put(g, "weight", np.array([int(inv)])), put(g, "bias", np.array([0]))
            put(g, "neuron/type", np.bytes_("SDNN")), put(g, "neuron/vThMant", np.int64(0))
            for i, (lyr, nl) in enumerate(zip(layers, net.layers)):
                g = lg.create_group(str(i + 1))
                g.create_dataset("type", (1,), "S10", [b"dense"])
                put(g, "shape", np.array([nl.n_out]))
                put(g, "inFeatures", np.int64(nl.weight.shape[1])), put(g, "outFeatures", np.int64(nl.n_out))
                put(g, "weight", nl.weight.astype(np.int64))
                put(g, "neuron/type", np.bytes_("SDNN")), put(g, "neuron/vThMant", np.int64(nl.vth))
                if nl.sigma_output:
                    put(g, "neuron/sigma_output", True)
                else:
                    put(g, "bias", nl.bias.astype(np.int64))
            m = f.create_group("edgesmith")
            put(m, "format_version", np.int64(FORMAT_VERSION))
            put(m, "input_scale", np.float64(cand.input_scale))
            put(m, "output_scale", np.float64(cand.output_scale))
            put(m, "output_bias", np.asarray(cand.output_bias, np.float64))
            put(m, "timesteps_per_sample", np.int64(net.steps_per_sample))
            put(m, "layer_names", np.array([lyr.name.encode() for lyr in layers]))
            put(m, "weight_scale", np.asarray(cand.scales, np.float64))


@register_pass(ExportNetxConfig)
def _export_netx(artifact: Artifact, config: ExportNetxConfig, ctx: PassContext) -> PassResult:
    calib = ctx.calibration_checked("calibration data (sets the fixed-point scales)")
    layers, fl, cand, net, db, table = choose_network(artifact.module, calib, config,
                                                      artifact.meta.get("learned_weight_scales"),
                                                      artifact.meta.get("learned_input_scale"))
    out = ctx.workdir / "model.net"
    write_netx(out, cand, layers, fl, net)
    input_shape = artifact.meta.get("input_shape") or list(np.asarray(calib).shape[1:])
    new = Artifact("netx", path=out, meta={**artifact.meta, "input_shape": list(input_shape), "precision": "fixed",
                                            "n_layers": net.n_layers, "timesteps_per_sample": net.steps_per_sample})
    reports = []
    for lyr, f, q, s, nl in zip(layers, fl, cand.weights, cand.scales, net.layers):
        qbits = int(np.ceil(np.log2(np.abs(q).max() + 1))) + 1
        reports.append(LayerReport(
            name=lyr.name, action="quantized", bits_per_weight=8.0, n_params=int(f.w.size),
            error={"weight_sqnr_db": report_db(sqnr_db(f.w, q * s)), "weight_bits_used": qbits},
            reason=f"{'Sigma output (bias on the host)' if nl.sigma_output else 'Sigma-Delta ReLU'}, "
                   f"netx weight_exp {nl.weight_exp}, {nl.num_weight_bits} weight bits"))
    how = ("the one qat-w8-loihi trained on" if cand.input_scale == artifact.meta.get("learned_input_scale") else
           f"chosen from {len(table)} powers of two by calibration output SQNR")
    notes = [f"input scale {cand.input_scale:g} (x_int = x / scale), {how} ({report_db(db)} dB calibration output "
             f"SQNR on {min(len(calib), N_SEARCH_SAMPLES)} samples)"]
    from edgesmith.compress.qat_loihi import learned_integers_kept

    kept = learned_integers_kept(artifact.meta, cand.scales)
    if kept is not None:  # the weights came from qat-w8-loihi: were its integers stored as learned?
        notes.append(f"QAT weights: {sum(kept)} of {len(kept)} layer(s) store the learned 8-bit integers exactly"
                     + ("" if all(kept) else "; in the others a bound the training did not see forced a coarser "
                        "scale, so their weights were rounded again: "
                        + ", ".join(lyr.name for lyr, k in zip(layers, kept) if not k)))
    if net.layers[-1].sigma_output:
        notes.append("the output layer is a Sigma accumulator (lava-dl's Output block): netx gives it no bias, "
                     "so its bias is added on the host (stored in the file's edgesmith group)")
    report = PassReport(config.to_dict(), "torch", "netx", artifact.size_bytes(), new.size_bytes(),
                        bits_per_weight=8.0, layers=reports, notes=notes,
                        extra={"input_scale": cand.input_scale, "output_scale": cand.output_scale,
                               "calibration_output_sqnr_db": report_db(db), "input_scale_search": table,
                               "timesteps_per_sample": net.steps_per_sample, "learned_integers_kept": kept})
    return PassResult(new, report)
