"""``import-nir``: a NIR graph of LIF-family neurons -> a fixed-point netx network of Lava LIF (CUBA) neurons.

Convolutions and pooling arrive lowered to their (sparse) matrices by ``compress/nir_graph.py``, so
they become dense netx layers whose zero synapses Lava does not store (``sparse`` synapses).

The graph is read as a chain of layers (``compress/nir_graph.py``); each becomes one netx ``dense``
layer whose CUBA neurons netx builds as Lava ``LIF`` processes (``LIFReset`` with the window as
reset interval), so the Lava runtime, its bit-exact reference (``netx-ref``) and the Loihi 2 cost
model treat it like any netx network.

Mapping (forward Euler at ``dt``, per layer; exact up to rounding, except where noted):
* one decay per layer, as Lava's LIF has: ``vDecay = round(4096 dt / tau)`` (``tau_mem`` for CubaLIF,
  0 for IF and I), ``iDecay = round(4096 dt / tau_syn)`` for CubaLIF and 4096 (no current memory)
  otherwise. Time constants that differ between the neurons of a layer are refused.
* each neuron's voltage is measured in units of its own threshold (LI / I: of 1), so one ``vThMant``
  serves the layer; r, w_in and the Euler factors fold into the neuron's row of weights, and the
  transform's bias plus the leak voltage into the neuron's bias. For CubaLIF the transform's bias
  enters the voltage at its steady-state value (exact once the synaptic current has settled).
* 8-bit weights: ``vThMant`` is the largest integer that keeps every weight within 127 (and the bias
  within Lava's 13-bit mantissa, the activation within 16 bits on the calibration data); the first
  layer's inputs become 16-bit graded messages whose scale is set the same way.
The pass checks the fixed-point network against the float NIR semantics on the calibration data
(output agreement and SQNR) and reports both per layer and overall.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
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
    CUBA_BIAS_LIMIT,
    CUBA_VTH_LIMIT,
    META_GROUP,
    NetxNet,
    descale,
    put,
    quantize_inputs,
    simulate,
    start_netx,
)
from edgesmith.compress.nir_graph import NirChain, NirLayer, load_chain, simulate_float
from edgesmith.compress.onnx_analysis import report_db, sqnr_db

WEIGHT_LIMIT = 127
ACTIVATION_LIMIT = 2 ** 15 - 1  # Lava LIF's a_in port is 16 bits
STATE_LIMIT = 2 ** 23 - 1  # u and v are 24-bit
MESSAGE_LIMIT = 2 ** 15 - 1  # graded input messages
FORMAT_VERSION = 1


@dataclass
class ImportNirConfig(PassConfig):
    """``dt``: the Euler step (seconds) the graph's time constants are read at (snnTorch exports at 1e-4);
    ``steps``: time steps each sample is presented for. None: the artifact's ``nir`` meta, else the defaults."""

    kind: ClassVar[str] = "import-nir"
    input_format: ClassVar[str] = "nir"
    output_format: ClassVar[str] = "netx"
    dt: float | None = None
    steps: int | None = None

    def validate(self):
        if self.dt is not None and not (isinstance(self.dt, (int, float)) and math.isfinite(self.dt) and self.dt > 0):
            raise EdgesmithError(f"import-nir: dt {self.dt!r} is not a positive number of seconds.",
                                 "pass e.g. dt=1e-4 (snnTorch's export step).")
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int)
                                       or not 1 <= self.steps <= 4096):
            raise EdgesmithError(f"import-nir: steps {self.steps!r} is not a whole number in 1..4096.",
                                 "pass e.g. steps=16.")


DEFAULT_DT, DEFAULT_STEPS = 1e-4, 16


@dataclass
class _Layer:
    decays: tuple[int, int]  # (iDecay, vDecay)
    gain: np.ndarray  # (n_out, n_in) float weights in threshold units per step
    bias: np.ndarray  # (n_out,) float bias in threshold units per step
    theta: np.ndarray  # (n_out,) the unit of each neuron's voltage
    notes: list


def _uniform(lyr: NirLayer, key: str, path) -> float:
    v = lyr.params[key]
    if np.ptp(v) > 1e-9 * np.abs(v).max():
        raise EdgesmithError(f"{path}: node {lyr.name!r} has {key} that differs between neurons; Lava's LIF has one "
                             "decay per layer.", "export the layer with a shared time constant.")
    return float(v[0])


def _decay(frac: float, what: str, lyr: NirLayer, path) -> int:
    if frac > 1:
        raise EdgesmithError(f"{path}: node {lyr.name!r}: dt / {what} = {frac:.3g} > 1, so forward Euler is unstable.",
                             "import with a smaller dt (the exporting library's step).")
    return int(round(4096 * frac))


def map_layer(lyr: NirLayer, dt: float, path) -> _Layer:
    """Decays, per-step input gain and bias of one layer, voltages in units of each neuron's threshold."""
    p, notes = lyr.params, []
    theta = p["v_threshold"] if lyr.spiking else np.ones(lyr.n_out)
    if lyr.neuron == "CubaLIF":
        fs, fm = dt / _uniform(lyr, "tau_syn", path), dt / _uniform(lyr, "tau_mem", path)
        i_decay, v_decay = max(_decay(fs, "tau_syn", lyr, path), 1), _decay(fm, "tau_mem", lyr, path)
        row = fm * p["r"] * fs * p["w_in"]
        bias = fm * (p["v_leak"] + p["r"] * p["w_in"] * lyr.bias)
        if np.any(lyr.bias != 0):
            notes.append(f"{lyr.name}: the transform's bias enters the voltage at its steady-state value")
    elif lyr.neuron in ("LIF", "LI"):
        f = dt / _uniform(lyr, "tau", path)
        i_decay, v_decay = 4096, _decay(f, "tau", lyr, path)
        row = f * p["r"]
        bias = f * (p["v_leak"] + p["r"] * lyr.bias)
    else:  # IF, I
        i_decay, v_decay = 4096, 0
        row = dt * p["r"]
        bias = dt * p["r"] * lyr.bias
    return _Layer((i_decay, v_decay), lyr.weight * (row / theta)[:, None], bias / theta, theta, notes)


def _vth_for(gain_max: float, bias_max: float, drive_max: float, v_max: float) -> int:
    """The largest threshold mantissa keeping weights within 127, biases within the 13-bit mantissa, the
    per-step activation within 16 bits and the voltage (with 2x headroom) within 24 bits."""
    limits = [CUBA_VTH_LIMIT, ACTIVATION_LIMIT / max(drive_max, 1e-12), STATE_LIMIT / (64 * 2 * max(v_max, 1.0))]
    if gain_max > 0:
        limits.append(WEIGHT_LIMIT / gain_max)
    if bias_max > 0:
        limits.append(CUBA_BIAS_LIMIT / bias_max)
    return max(1, int(math.floor(min(limits))))


@dataclass
class Fixed:
    net: NetxNet
    weights: list
    biases: list
    vths: list
    input_scale: float
    output_scale: float
    mapped: list


def quantize_checked(chain: NirChain, dt: float, steps: int, calibration: np.ndarray, path="graph") -> Fixed:
    """``quantize``, where parameters fixed point cannot represent (a threshold of 1e-300, a time constant of 1e300:
    what a damaged or hostile file holds) are one error naming the graph, not an overflow deep in the arithmetic."""
    with np.errstate(all="ignore"):
        try:
            fixed = quantize(chain, dt, steps, calibration, path)
        except (ZeroDivisionError, OverflowError) as e:
            fixed, problem = None, str(e)
        else:
            arrays = [*fixed.weights, *fixed.biases, np.asarray(fixed.vths, np.float64),
                      np.asarray([fixed.input_scale, fixed.output_scale])]
            problem = None if all(np.isfinite(np.asarray(a, np.float64)).all() for a in arrays) else "non-finite values"
    if problem is not None:
        raise EdgesmithError(f"{path}: its neuron parameters and weights cannot be mapped to Loihi's fixed point "
                             f"({problem}): some are far outside the range of a trained network.",
                             "check the graph's thresholds, time constants and weights (re-export it).")
    return fixed


def quantize(chain: NirChain, dt: float, steps: int, calibration: np.ndarray, path="graph") -> Fixed:
    """Integer weights, biases and thresholds of the netx network; the first layer's scale from the
    calibration inputs' peak, each layer's threshold mantissa lowered until its activation fits 16 bits."""
    from edgesmith.compress.netx_format import NetxLayer, netx_weights

    mapped = [map_layer(lyr, dt, path) for lyr in chain.layers]
    x = np.asarray(calibration, np.float64).reshape(len(calibration), -1)
    peak_x = float(np.abs(x).max(initial=0.0)) or 1.0
    peak_v = simulate_float(chain, x, dt, steps)[1]["peak_v"]
    weights, biases, vths = [], [], []
    input_scale = 1.0
    for k, m in enumerate(mapped):
        gmax = float(np.abs(m.gain).max(initial=0.0))
        bmax = float(np.abs(m.bias).max(initial=0.0))
        if gmax == 0:
            raise EdgesmithError(f"{path}: layer {chain.layers[k].name!r} has only zero weights.", "check the graph.")
        if k == 0:
            # weights fill 8 bits; the input unit makes |x_int| <= MESSAGE_LIMIT and the threshold as fine as allowed
            drive = float(np.abs(x @ m.gain.T).max(initial=0.0))
            vth = _vth_for(0.0, bmax, drive, peak_v[k])
            vth = min(vth, max(1, int(MESSAGE_LIMIT * WEIGHT_LIMIT / (gmax * peak_x))))
            input_scale = WEIGHT_LIMIT / (gmax * vth)
            q = np.rint(m.gain * vth * input_scale)
        else:  # binary spikes in: the worst case is every input spiking at once
            drive = float(max(np.clip(m.gain, 0, None).sum(1).max(), -np.clip(m.gain, None, 0).sum(1).min()))
            vth = _vth_for(gmax, bmax, drive, peak_v[k])
            q = np.rint(m.gain * vth)
        q = np.clip(q, -WEIGHT_LIMIT, WEIGHT_LIMIT).astype(np.int64)
        if not np.any(q):
            raise EdgesmithError(f"{path}: layer {chain.layers[k].name!r} rounds to all-zero weights.",
                                 "check the graph's weights (netx cannot load an all-zero layer).")
        weights.append(q)
        biases.append(np.clip(np.rint(m.bias * vth), -CUBA_BIAS_LIMIT, CUBA_BIAS_LIMIT).astype(np.int64))
        vths.append(vth)
    last = chain.layers[-1]
    output_scale = 1.0 if last.spiking else 1.0 / (64.0 * vths[-1])
    layers = []
    for k, (q, b, vth, m) in enumerate(zip(weights, biases, vths, mapped)):
        lw, e, nb = netx_weights(q)
        # a non-spiking readout (LI, I) keeps its voltage unit but gets the highest threshold, so it never fires
        file_vth = vth if chain.layers[k].spiking else CUBA_VTH_LIMIT
        layers.append(NetxLayer(chain.layers[k].name, q, lw, e, nb, b, file_vth, False,
                                cuba={"i_decay": m.decays[0], "v_decay": m.decays[1]}))
    net = NetxNet(layers=layers, n_inputs=chain.n_inputs, input_vth=0, input_weight=1.0 / input_scale, input_bias=0.0,
                  output_scale=output_scale, output_bias=np.zeros(last.n_out), steps_per_sample=steps,
                  has_input_layer=False, readout=chain.readout)
    return Fixed(net, weights, biases, vths, input_scale, output_scale, mapped)


def write_cuba_netx(path, fixed: Fixed, chain: NirChain, dt: float) -> None:
    """lava-dl's layout: an input layer without neuron (graded inputs), dense layers of CUBA neurons."""
    import h5py

    net = fixed.net
    with atomic_path(path, force=True) as tmp:
        with h5py.File(tmp, "w") as f:
            lg, _ = start_netx(f, net.n_inputs)
            for i, lyr in enumerate(net.layers):
                g = lg.create_group(str(i + 1))
                g.create_dataset("type", (1,), "S10", [b"dense"])
                put(g, "shape", np.array([lyr.n_out]))
                put(g, "inFeatures", np.int64(lyr.weight.shape[1])), put(g, "outFeatures", np.int64(lyr.n_out))
                put(g, "weight", lyr.weight.astype(np.int64))
                if np.any(lyr.bias):
                    put(g, "bias", lyr.bias.astype(np.int64))
                put(g, "neuron/type", np.bytes_("CUBA"))
                put(g, "neuron/iDecay", np.int64(lyr.cuba["i_decay"])), put(g, "neuron/vDecay", np.int64(lyr.cuba["v_decay"]))
                put(g, "neuron/vThMant", np.int64(lyr.vth)), put(g, "neuron/refDelay", np.int64(1))
                put(g, "neuron/gradedSpike", False)
            m = f.create_group(META_GROUP)
            put(m, "format_version", np.int64(FORMAT_VERSION))
            put(m, "source", np.bytes_("nir"))
            put(m, "input_scale", np.float64(fixed.input_scale))
            put(m, "output_scale", np.float64(fixed.output_scale))
            put(m, "output_bias", np.zeros(net.n_outputs))
            put(m, "timesteps_per_sample", np.int64(net.steps_per_sample))
            put(m, "readout", np.bytes_(net.readout))
            put(m, "dt", np.float64(dt))
            put(m, "layer_names", np.array([lyr.name.encode() for lyr in chain.layers]))


def compare(chain: NirChain, net: NetxNet, x: np.ndarray, dt: float) -> dict:
    """The fixed-point network against the float NIR semantics on ``x``: output SQNR and argmax agreement."""
    ref, fstats = simulate_float(chain, x, dt, net.steps_per_sample)
    res = simulate(net, quantize_inputs(net, x))
    out = descale(net, res.outputs)
    return {"output_sqnr_db": report_db(sqnr_db(ref, out)),
            "argmax_agreement": float(np.mean(ref.argmax(1) == out.argmax(1))),
            "float_spikes_per_sample": fstats["spikes_per_sample"], "overflow": res.stats["overflow"],
            "samples": int(len(x))}


@register_pass(ImportNirConfig)
def _import_nir(artifact: Artifact, config: ImportNirConfig, ctx: PassContext) -> PassResult:
    meta = artifact.meta.get("nir") or {}
    dt = float(config.dt if config.dt is not None else meta.get("dt", DEFAULT_DT))
    steps = int(config.steps if config.steps is not None else meta.get("steps", DEFAULT_STEPS))
    chain = load_chain(artifact.path)
    calib = np.asarray(ctx.calibration_checked("calibration data (sets the input scale)"), np.float64)
    calib = calib.reshape(len(calib), -1)
    fixed = quantize_checked(chain, dt, steps, calib, artifact.path)
    out = ctx.workdir / "model.net"
    write_cuba_netx(out, fixed, chain, dt)
    check = compare(chain, fixed.net, calib[:64], dt)
    reports = []
    for lyr, m, q, vth, nl in zip(chain.layers, fixed.mapped, fixed.weights, fixed.vths, fixed.net.layers):
        scale = 1.0 / (vth * fixed.input_scale) if nl is fixed.net.layers[0] else 1.0 / vth  # float per integer step
        reports.append(LayerReport(
            name=lyr.name, action="quantized", bits_per_weight=8.0, n_params=int(lyr.weight.size),
            error={"weight_sqnr_db": report_db(sqnr_db(m.gain, q * scale)), "vThMant": vth,
                   "iDecay": nl.cuba["i_decay"], "vDecay": nl.cuba["v_decay"]},
            reason=f"{lyr.neuron} -> Lava LIF (CUBA), " + "; ".join(m.notes) if m.notes else f"{lyr.neuron} -> Lava LIF (CUBA)"))
    notes = [f"NIR graph {chain.layers[0].weight.shape[1]} -> {[lyr.n_out for lyr in chain.layers]}, dt {dt:g} s, "
             f"{steps} steps per sample (window {steps + 1}); fixed point vs float NIR on {check['samples']} calibration "
             f"samples: argmax agreement {check['argmax_agreement']:.3f}, output SQNR {check['output_sqnr_db']} dB"]
    notes += [n for m in fixed.mapped for n in m.notes]
    if any(check["overflow"].values()):
        notes.append(f"fixed-point overflow on the calibration data: {check['overflow']}")
    new = Artifact("netx", path=out, meta={**artifact.meta, "input_shape": list(chain.input_shape), "precision": "fixed",
                                            "n_layers": len(chain.layers), "timesteps_per_sample": steps})
    report = PassReport(config.to_dict(), "nir", "netx", artifact.size_bytes(), new.size_bytes(), bits_per_weight=8.0,
                        layers=reports, notes=notes,
                        extra={"float_vs_fixed": check, "dt": dt, "steps": steps, "input_scale": fixed.input_scale,
                               "output_scale": fixed.output_scale, "readout": chain.readout})
    return PassResult(new, report)
