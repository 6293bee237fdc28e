"""Read netx HDF5 networks (lava-dl's exchange format) and compute, bit for bit, what Lava runs for them.

A netx file (``layer/0..n-1`` groups, written by lava-dl's ``export_hdf5`` or by ``export-netx``) is
loaded in Lava with ``lava.lib.dl.netx.hdf5.Network``. This module reads the same file with h5py and
reproduces, step by step, the integers that Lava 0.10's fixed-point process models compute for it
(``Loihi2SimCfg(select_tag='fixed_pt')``), so tests and sweeps can check a Lava run exactly without
starting the simulator. Supported: Sigma-Delta (``SDNN``) networks of ``input``, ``flatten`` and
``dense`` layers; anything else is refused by name when the file is read.

What netx builds, and what this model reproduces:

* ``input`` layer with an SDNN neuron: a Delta encoder. netx's Input block has no input port (lava-dl
  drives it through its bias), so the network is loaded with ``skip_layers=1`` and the encoder runs on
  the host: each step it takes the integer input ``x`` (``x << 12``), sends ``delta >> 6`` where
  ``|delta| >= vThMant << 12`` and keeps the rest as residue (Lava's ``Delta`` with spike_exp 6,
  state_exp 6). ``x = round(weight * input + bias)`` with the layer's transform (default weight 64).
* ``dense`` layer: netx's ``optimize_weight_bits`` shifts the file's integer weights left by
  ``scale_bits`` into the 8-bit range and sets ``weight_exp = -scale_bits``; Lava's Dense clips the
  weights to 8 bits and drops ``8 - num_weight_bits`` low bits (one more for mixed signs); each step
  it sends the previous step's buffer (one step of delay) and sets ``a = (W . s) >> -weight_exp``.
* SDNN neuron (``SigmaDelta``, ReLU, spike_exp 6, state_exp 6): ``sigma += a``;
  ``act = relu(sigma + bias << 12)``; ``delta = act - act_prev + residue``; the spike is ``delta``
  where ``|delta| >= vThMant << 12``; ``residue = delta - spike``; it sends ``spike >> 6``.
* SDNN neuron with ``sigma_output`` (lava-dl's Output block): ``Sigma``: ``sigma += a``, sends
  ``sigma`` every step.

Samples are time-multiplexed: sample ``i`` is held at the input for ``timesteps_per_sample`` steps
and its output is read at the window's last step (the output layer's sigma, or the running sum of
its messages when it is a Sigma-Delta layer). State carries over from sample to sample.

Activity counts over all steps: ``synops`` (each nonzero message times the nonzero synapses it
drives), ``neuron_updates`` (every neuron of every dense layer, every step; the host-side encoder is
not a chip neuron), ``messages`` (nonzero messages sent by the encoder and by every layer).

``export-netx`` adds a group ``edgesmith`` that netx ignores: the float input scale, the output
scale and bias (a Sigma output layer has no bias, so it is added on the host), the window length and
layer names. Files without it (lava-dl's) use the input transform and lava-dl's fixed-point units:
weights and biases in 1/64, messages in 1/4096, sigma in 1/2**18.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from edgesmith.common import EdgesmithError, raised

SPIKE_EXP = 6  # netx.hdf5.Network's default spike_exp
STATE_EXP = 6  # hard-coded by netx for Sigma-Delta neurons
SCALE = 1 << (SPIKE_EXP + STATE_EXP)  # vth, bias and encoder inputs are shifted left by this
INT32 = 2 ** 31
STATE_BITS = 24  # Loihi 2 neuron state width
MESSAGE_BITS = 16  # netx's default graded-spike payload for SDNN layers
BIAS_BITS = 16  # the SigmaDelta bias Var's precision
SUPPORTED_LAYERS = ("input", "flatten", "dense")
META_GROUP = "edgesmith"


@dataclass
class NetxLayer:
    """One dense layer as Lava runs it: effective integer weights, shift, neuron parameters."""

    name: str
    weight: np.ndarray  # (out, in) the file's integers
    lava_weight: np.ndarray  # (out, in) int64 what Lava's Dense multiplies with
    weight_exp: int
    num_weight_bits: int
    bias: np.ndarray  # (out,) int64 mantissa (file value); Lava uses bias << 12
    vth: int  # mantissa; Lava uses vth << 12
    sigma_output: bool  # a Sigma accumulator (lava-dl Output block) instead of a Sigma-Delta neuron
    # CUBA (Lava LIF) neurons instead: {"i_decay": iDecay, "v_decay": vDecay} (4096 = no memory, 0 = no decay)
    cuba: dict | None = None

    @property
    def n_out(self) -> int:
        return int(self.weight.shape[0])

    @property
    def neuron(self) -> str:
        return "CUBA" if self.cuba else "Sigma" if self.sigma_output else "SigmaDelta"


@dataclass
class NetxNet:
    """A netx network: host-side Delta encoder plus dense layers, with the scales that map floats to it."""

    layers: list[NetxLayer]
    n_inputs: int
    input_vth: int
    input_weight: float  # x_int = round(input_weight * x + input_bias)
    input_bias: float
    output_scale: float
    output_bias: np.ndarray
    steps_per_sample: int
    has_input_layer: bool
    units: str = "edgesmith"  # where the float scales come from: the file's edgesmith group, or lava-dl's units
    path: str = ""
    notes: list[str] = field(default_factory=list)
    # CUBA networks (edgesmith's NIR import): each sample is a window of steps + 1 steps, the state reset at its
    # start (netx reset_interval); inputs go straight to the first dense layer; readout "spikes" (counts over the
    # window) or "voltage" (the last layer's v at the last input step)
    readout: str = ""

    @property
    def cuba(self) -> bool:
        return bool(self.layers[0].cuba)

    @property
    def window(self) -> int:
        return self.steps_per_sample + 1

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_outputs(self) -> int:
        return self.layers[-1].n_out

    @property
    def input_limit(self) -> int:
        """Largest |x_int|: one whose ``x << 12`` stays inside a 24-bit neuron state (Sigma-Delta), or a 16-bit
        graded message (CUBA networks get the integers directly)."""
        if self.cuba:
            return 2 ** (MESSAGE_BITS - 1) - 1
        return 2 ** (STATE_BITS - 1) // SCALE - 1

    @classmethod
    def load(cls, path: str | Path) -> "NetxNet":
        return read_netx(path)

    def describe(self) -> dict:
        return {"layers": [{"name": lyr.name, "shape": list(lyr.weight.shape), "neuron": lyr.neuron, "weight_exp": lyr.weight_exp, "num_weight_bits": lyr.num_weight_bits,
                            "vth": lyr.vth} for lyr in self.layers],
                "input_vth": self.input_vth, "steps_per_sample": self.steps_per_sample}


def _bad(path, problem: str, fix: str) -> EdgesmithError:
    return EdgesmithError(f"{path}: {problem}", fix)


def _scalar(group, key, default=None):
    if key not in group:
        return default
    v = np.asarray(group[key][()])
    if v.dtype.kind in "SO":
        v = np.char.decode(v.astype("S"), "ascii")
    return v.reshape(-1)[0].item() if v.size else default


def read_netx(path: str | Path) -> NetxNet:
    """Parse a netx HDF5 file; refuse, by layer and name, what netx or this reference cannot run."""
    import h5py

    path = Path(path)
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as e:
        raise _bad(path, f"is not a readable HDF5 file ({e}).", "pass a netx network written by lava-dl's "
                   "export_hdf5 or by edgesmith's export-netx pass.") from None
    with f:
        try:
            return _parse_netx(path, f)
        except EdgesmithError:
            raise
        except (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
            # h5py reads lazily: a damaged object header or heap shows only when that group is opened
            raise _bad(path, f"is a damaged HDF5 file ({raised(e, 160)}).", "pass an intact netx network (copy it "
                       "again) written by lava-dl's export_hdf5 or by edgesmith's export-netx pass.") from None


def _parse_netx(path: Path, f) -> NetxNet:
    if "layer" not in f:
        raise _bad(path, "has no 'layer' group, so it is not a netx network.",
                   "pass a netx network written by lava-dl's export_hdf5 or by edgesmith's export-netx pass.")
    keys = sorted(f["layer"].keys(), key=lambda k: int(k) if k.isdigit() else -1)
    if not keys or any(not k.isdigit() for k in keys) or [int(k) for k in keys] != list(range(len(keys))):
        raise _bad(path, f"its layers are named {keys[:8]}, not 0..n-1.", "write layers as layer/0, layer/1, ...")
    groups = [f["layer"][k] for k in keys]
    types = [str(_scalar(g, "type", "?")) for g in groups]
    unsupported = [f"layer {i} ({t})" for i, t in enumerate(types) if t not in SUPPORTED_LAYERS]
    if unsupported:
        raise _bad(path, f"has layers this toolkit cannot run: {', '.join(unsupported)}; it runs input, "
                   "flatten and dense layers of Sigma-Delta (SDNN) neurons.",
                   "export a dense Sigma-Delta network (conv, pooling, recurrent and complex layers are not "
                   "supported yet).")
    for i, g in enumerate(groups):
        if "delay" in g:
            raise _bad(path, f"layer {i} has synaptic delays, which this toolkit does not model.",
                       "export the network without learnable delays.")
    ntypes = {str(_scalar(g["neuron"], "type", "?")) for g in groups if "neuron" in g}
    if ntypes == {"CUBA"} and types[0] == "input" and "neuron" not in groups[0] and META_GROUP in f:
        return _build_cuba(path, f, groups, types)
    for i, g in enumerate(groups):
        if "neuron" in g:
            ntype = str(_scalar(g["neuron"], "type", "?"))
            if ntype != "SDNN":
                raise _bad(path, f"layer {i} ({types[i]}) has {ntype} neurons; this toolkit runs Sigma-Delta "
                           "(SDNN) networks, and CUBA networks written by its NIR import.",
                           "export the network with slayer.block.sigma_delta blocks.")
    return _build(path, f, groups, types)


def _build(path: Path, f, groups, types) -> NetxNet:
    notes: list[str] = []
    has_input = types[0] == "input" and "neuron" in groups[0]
    input_vth, tw, tb = 0, 64.0, 0.0
    n_in = None
    if types[0] == "input":
        shape = np.asarray(groups[0]["shape"][()]).reshape(-1) if "shape" in groups[0] else None
        n_in = int(np.prod(shape)) if shape is not None else None
        if has_input:
            input_vth = int(_scalar(groups[0]["neuron"], "vThMant", 0))
        tw = float(_scalar(groups[0], "weight", 64))
        tb = float(_scalar(groups[0], "bias", 0))
    dense_groups = [(i, g) for i, g in enumerate(groups) if types[i] == "dense"]
    if not dense_groups:
        raise _bad(path, "has no dense layer.", "export a network with at least one dense layer.")
    if not has_input:
        raise _bad(path, "starts without an SDNN input layer, so its first dense layer expects binary spikes.",
                   "export the network with a slayer.block.sigma_delta.Input block first.")
    layers = []
    for k, (i, g) in enumerate(dense_groups):
        if "neuron" not in g:
            raise _bad(path, f"layer {i} (dense) has no neuron group.", "export it with its neuron parameters.")
        w = np.asarray(g["weight"][()])
        if w.ndim == 1:
            w = w.reshape(int(np.prod(np.asarray(g["shape"][()]))), -1)
        w = w.reshape(w.shape[0], -1)
        if not np.all(np.isfinite(w)) or np.any(w != np.round(w)):
            raise _bad(path, f"layer {i} has non-integer weights.", "export fixed-point (integer) weights.")
        w = w.astype(np.int64)
        if w.min(initial=0) < -256 or w.max(initial=0) > 255 or (w.min(initial=0) < 0 and w.max(initial=0) > 254):
            raise _bad(path, f"layer {i} has weights in [{w.min()}, {w.max()}]; netx clips them to 8 bits "
                       "([-256, 254] with mixed signs).", "re-export with 8-bit weights.")
        if not np.any(w):
            raise _bad(path, f"layer {i} has only zero weights, which netx cannot load (it sizes weights by the "
                       "largest one).", "drop the layer or re-export it.")
        lava_w, wexp, nbits = netx_weights(w)
        neuron = g["neuron"]
        sigma_out = "sigma_output" in neuron
        bias = np.asarray(g["bias"][()]).reshape(-1).astype(np.int64) if "bias" in g else np.zeros(w.shape[0], np.int64)
        if sigma_out and "bias" in g:
            raise _bad(path, f"layer {i} is a Sigma output layer with a bias, which netx cannot build.",
                       "drop the output bias (add it on the host).")
        if bias.shape[0] != w.shape[0]:
            raise _bad(path, f"layer {i} has {bias.shape[0]} biases for {w.shape[0]} neurons.", "re-export it.")
        wrap = int(np.sum(np.abs(bias) * SCALE >= INT32))
        if wrap:
            raise _bad(path, f"layer {i}: {wrap} of {bias.size} biases overflow int32 once netx shifts them left "
                       f"by {SPIKE_EXP + STATE_EXP} bits (|bias| must stay below {INT32 // SCALE}).",
                       "re-export with smaller biases (a larger activation scale).")
        if np.any(np.abs(bias) >= 2 ** (BIAS_BITS - 1)):
            notes.append(f"layer {i}: biases exceed the {BIAS_BITS}-bit bias field of a Loihi 2 neuron.")
        if layers and layers[-1].sigma_output:
            raise _bad(path, f"layer {i} follows a Sigma output layer.", "put the Sigma output layer last.")
        expect_in = layers[-1].n_out if layers else n_in
        if expect_in is not None and w.shape[1] != expect_in:
            raise _bad(path, f"layer {i} takes {w.shape[1]} inputs but the layer before has {expect_in} outputs.",
                       "re-export the network; its layers do not chain.")
        layers.append(NetxLayer(name=f"layer{i}", weight=w, lava_weight=lava_w, weight_exp=wexp, num_weight_bits=nbits,
                                bias=bias, vth=int(_scalar(neuron, "vThMant", 0)), sigma_output=sigma_out))
    n_in = layers[0].weight.shape[1]
    meta = f[META_GROUP] if META_GROUP in f else None
    if meta is not None:
        in_scale = float(_scalar(meta, "input_scale"))
        tw, tb = 1.0 / in_scale, 0.0
        out_scale = float(_scalar(meta, "output_scale"))
        out_bias = np.asarray(meta["output_bias"][()], np.float64) if "output_bias" in meta else np.zeros(layers[-1].n_out)
        steps = int(_scalar(meta, "timesteps_per_sample"))
        names = [str(s.decode() if isinstance(s, bytes) else s) for s in meta["layer_names"][()]] \
            if "layer_names" in meta else []
        if len(names) == len(layers):
            for lyr, nm in zip(layers, names):
                lyr.name = nm
    else:
        # lava-dl's units: inputs 1/64 (the transform), weights 1/64, messages 1/4096, sigma 1/2**18
        out_scale = 2.0 ** -(SPIKE_EXP + STATE_EXP + 6) if layers[-1].sigma_output else 2.0 ** -(SPIKE_EXP + 6)
        out_bias = np.zeros(layers[-1].n_out)
        steps = len(layers) + 1
    return NetxNet(layers=layers, n_inputs=int(n_in), input_vth=input_vth, input_weight=tw, input_bias=tb,
                   output_scale=out_scale, output_bias=out_bias, steps_per_sample=steps, has_input_layer=has_input,
                   units="edgesmith" if meta is not None else "lava-dl", path=str(path), notes=notes)


CUBA_BIAS_LIMIT = 4095  # Lava LIF bias_mant: 13-bit signed
CUBA_VTH_LIMIT = 2 ** 17 - 1  # Lava LIF vth: 17-bit unsigned
LIF_SHIFT = 6  # Lava LIF: activation, bias (netx bias_exp) and vth are shifted left by 6


def put(group, key: str, value) -> None:
    """One dataset of a netx file (netx reads every field as a dataset)."""
    group.create_dataset(key, data=value)


def start_netx(f, n_inputs: int):
    """The ``layer`` group of a new netx file with its ``input`` layer 0: (layer group, input layer group)."""
    layers = f.create_group("layer")
    g = layers.create_group("0")
    g.create_dataset("type", (1,), "S10", [b"input"])
    put(g, "shape", np.array([n_inputs]))
    return layers, g


def _dense_weights(path, i: int, g) -> np.ndarray:
    w = np.asarray(g["weight"][()])
    w = w.reshape(w.shape[0], -1)
    if not np.all(np.isfinite(w)) or np.any(w != np.round(w)):
        raise _bad(path, f"layer {i} has non-integer weights.", "export fixed-point (integer) weights.")
    w = w.astype(np.int64)
    if w.min(initial=0) < -256 or w.max(initial=0) > 255 or not np.any(w):
        raise _bad(path, f"layer {i} has weights in [{w.min()}, {w.max()}]; netx needs 8-bit, not all-zero weights.",
                   "re-export with 8-bit weights.")
    return w


def _build_cuba(path: Path, f, groups, types) -> NetxNet:
    """A CUBA (Lava LIF) network written by edgesmith's NIR import: direct graded inputs, reset windows."""
    meta = f[META_GROUP]
    layers = []
    n_in = int(np.prod(np.asarray(groups[0]["shape"][()]).reshape(-1)))
    for i, g in enumerate(groups[1:], start=1):
        if types[i] != "dense":
            raise _bad(path, f"layer {i} ({types[i]}) is not dense; CUBA networks here are dense chains.",
                       "re-import the NIR graph.")
        w = _dense_weights(path, i, g)
        expect = layers[-1].n_out if layers else n_in
        if w.shape[1] != expect:
            raise _bad(path, f"layer {i} takes {w.shape[1]} inputs but the layer before has {expect} outputs.",
                       "re-import the NIR graph.")
        nrn = g["neuron"]
        i_decay, v_decay, vth = (int(_scalar(nrn, k)) for k in ("iDecay", "vDecay", "vThMant"))
        if not (1 <= i_decay <= 4096 and 0 <= v_decay <= 4096 and 0 <= vth <= CUBA_VTH_LIMIT):
            raise _bad(path, f"layer {i}: iDecay {i_decay}, vDecay {v_decay}, vThMant {vth} are outside Lava LIF's "
                       "ranges (1..4096, 0..4096, 0..131071).", "re-import the NIR graph.")
        bias = np.asarray(g["bias"][()]).reshape(-1).astype(np.int64) if "bias" in g else np.zeros(len(w), np.int64)
        if np.any(np.abs(bias) > CUBA_BIAS_LIMIT):
            raise _bad(path, f"layer {i}: biases exceed Lava LIF's 13-bit bias mantissa.", "re-import the NIR graph.")
        lava_w, wexp, nbits = netx_weights(w)
        layers.append(NetxLayer(name=f"layer{i}", weight=w, lava_weight=lava_w, weight_exp=wexp, num_weight_bits=nbits,
                                bias=bias, vth=vth, sigma_output=False, cuba={"i_decay": i_decay, "v_decay": v_decay}))
    names = [str(s.decode() if isinstance(s, bytes) else s) for s in meta["layer_names"][()]] \
        if "layer_names" in meta else []
    for lyr, nm in zip(layers, names if len(names) == len(layers) else []):
        lyr.name = nm
    out_bias = np.asarray(meta["output_bias"][()], np.float64) if "output_bias" in meta else np.zeros(layers[-1].n_out)
    return NetxNet(layers=layers, n_inputs=n_in, input_vth=0, input_weight=1.0 / float(_scalar(meta, "input_scale")),
                   input_bias=0.0, output_scale=float(_scalar(meta, "output_scale")), output_bias=out_bias,
                   steps_per_sample=int(_scalar(meta, "timesteps_per_sample")), has_input_layer=False,
                   units="edgesmith", path=str(path), readout=str(_scalar(meta, "readout", "spikes")))


def _decay(x: np.ndarray, d: int) -> np.ndarray:
    """Lava's ``sign(x * (4096 - d)) * (|x * (4096 - d)| >> 12)``."""
    prod = x * (4096 - d)
    return np.sign(prod) * (np.abs(prod) >> 12)


def cuba_inputs(net: NetxNet, x_int: np.ndarray) -> np.ndarray:
    """(n_in, N * window + layers) messages: each sample's integers for its ``steps`` input steps, then zeros
    (the step in which the next window's reset happens, and at the end the steps the layers' delays need)."""
    x_int = np.asarray(x_int, np.int64)
    n, w, steps = len(x_int), net.window, net.steps_per_sample
    out = np.zeros((net.n_inputs, n * w + net.n_layers), np.int64)
    for i in range(n):
        out[:, i * w: i * w + steps] = x_int[i][:, None]
    return out


def _simulate_cuba(net: NetxNet, x_int: np.ndarray) -> "SimResult":
    in_msg = cuba_inputs(net, x_int)
    total, w = in_msg.shape[1], net.window
    shapes = [lyr.n_out for lyr in net.layers]
    u = [np.zeros(k, np.int64) for k in shapes]
    v = [np.zeros(k, np.int64) for k in shapes]
    a_buff = [np.zeros(k, np.int64) for k in shapes]
    msgs = [np.zeros((k, total), np.int64) for k in shapes]
    last_v = np.zeros((shapes[-1], total), np.int64)
    lim = 2 ** (STATE_BITS - 1)
    peak = {"activation": 0, "u_wraps": 0, "v_clips": 0}
    for t in range(total):
        s_prev = in_msg[:, t]
        for k, lyr in enumerate(net.layers):
            a_in = a_buff[k]
            acc = lyr.lava_weight @ s_prev
            e = lyr.weight_exp
            a_buff[k] = acc << e if e > 0 else acc >> -e
            if (t + 1) % w == (1 + k) % w:  # netx's LIFReset: layer k resets at time_step % window == 1 + k
                u[k][:] = 0
                v[k][:] = 0
            peak["activation"] = max(peak["activation"], int(np.abs(a_in).max(initial=0)))
            cu = _decay(u[k], lyr.cuba["i_decay"]) + (a_in << LIF_SHIFT)
            wrapped = np.where(cu > lim, cu - 2 * lim, cu)
            wrapped = np.where(wrapped <= -lim, cu + 2 * lim, wrapped)
            peak["u_wraps"] += int(np.count_nonzero(wrapped != cu))
            u[k] = wrapped
            nv = _decay(v[k], lyr.cuba["v_decay"]) + u[k] + (lyr.bias << LIF_SHIFT)
            clipped = np.clip(nv, -lim + 1, lim - 1)
            peak["v_clips"] += int(np.count_nonzero(clipped != nv))
            spike = clipped > (lyr.vth << LIF_SHIFT)
            v[k] = np.where(spike, 0, clipped)
            msgs[k][:, t] = spike
            s_prev = spike.astype(np.int64)
        last_v[:, t] = v[-1]
    stats = activity_counts(net, in_msg, msgs)
    stats["overflow"] = {"activation_16bit": peak["activation"] >= 2 ** 15, "current_24bit_wrap": peak["u_wraps"] > 0,
                         "voltage_24bit_clip": peak["v_clips"] > 0}
    return SimResult(cuba_outputs(net, msgs[-1], last_v), msgs, in_msg, stats)


def cuba_outputs(net: NetxNet, out_messages: np.ndarray, last_v: np.ndarray | None = None) -> np.ndarray:
    """(N, n_out) per window: the last layer's spike count over its window, or its v at the last input step.

    Layer L-1 handles the step of input column c at time step c + L (one step of delay per dense layer);
    sample i's window is input columns i*w - 1 (reset, zero input) .. i*w + steps - 1."""
    big_l, w, steps = net.n_layers, net.window, net.steps_per_sample
    n = (out_messages.shape[1] - big_l) // w
    if net.readout == "voltage":
        if last_v is None:
            raise ValueError("a voltage readout needs the last layer's v")
        return np.stack([last_v[:, i * w + steps - 1 + big_l] for i in range(n)]).astype(np.int64)
    return np.stack([out_messages[:, max(i * w - 1 + big_l, 0): i * w + steps + big_l].sum(axis=1)
                     for i in range(n)]).astype(np.int64)


def lava_inputs(net: NetxNet, x_int: np.ndarray) -> np.ndarray:
    """What the host sends into the first dense layer: Delta-encoded (Sigma-Delta) or direct (CUBA)."""
    return cuba_inputs(net, x_int) if net.cuba else encode(net, x_int)


def lava_outputs(net: NetxNet, messages: list, last_v: np.ndarray | None = None) -> np.ndarray:
    return cuba_outputs(net, messages[-1], last_v) if net.cuba else window_outputs(net, messages[-1])


def netx_weights(w: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(what Lava's Dense multiplies with, weight_exp, num_weight_bits) for a file's integer weights.

    netx's optimize_weight_bits: the sign mode and the scale that fills 8 bits (127/max, -128/min for
    mixed signs, 255/max excitatory, 256/|min| inhibitory) give ``scale_bits = floor(log2(scale))``
    (+1 for mixed signs); the weights are shifted left by it and ``weight_exp = -scale_bits``; the number
    of trailing zero bits ``n`` common to all weights (minus the sign bit) gives
    ``num_weight_bits = 8 - scale_bits - n``. Lava's Dense then clips to 8 bits and drops
    ``8 - num_weight_bits`` low bits (one more for mixed signs).
    """
    w = np.asarray(w, np.int64)
    hi, lo = int(w.max()), int(w.min())
    if hi == 0 and lo == 0:
        raise ValueError("all-zero weights: netx cannot size them (its scale divides by the largest weight)")
    if hi < 0:  # netx's rule (Lava's own rule, used below for the clip, calls max <= 0 inhibitory)
        signed, scale = 0, -256.0 / lo
    elif lo >= 0:
        signed, scale = 0, 255.0 / hi
    else:
        signed, scale = 1, min(127.0 / hi if hi > 0 else math.inf, -128.0 / lo)
    scale_bits = int(math.floor(math.log2(scale))) + signed
    n = 8
    while n > 0 and np.any(w % (1 << n) != 0):
        n -= 1
    n -= signed
    num_bits = 8 - scale_bits - n
    shifted = w << scale_bits if scale_bits >= 0 else w >> -scale_bits
    return lava_clip_truncate(shifted, num_bits), -scale_bits, num_bits


def lava_clip_truncate(w: np.ndarray, num_weight_bits: int) -> np.ndarray:
    """Lava's clip_weights(8 bits) then truncate_weights(num_weight_bits) for the matrix's own sign mode."""
    w = np.asarray(w, np.int64)
    if w.min() >= 0:
        mode = "excitatory"
    elif w.max() <= 0:
        mode = "inhibitory"
    else:
        mode = "mixed"
    if mode == "inhibitory":
        w = -w
    mixed = int(mode == "mixed")
    w = np.clip(w, -(2 ** 8) * mixed, 2 ** 8 - 1)
    drop = 8 - num_weight_bits + mixed
    w = (w >> drop) << drop if drop > 0 else w
    return -w if mode == "inhibitory" else w


def quantize_inputs(net: NetxNet, x: np.ndarray) -> np.ndarray:
    """Float inputs (N, ...) -> the encoder's integers (N, n_in), clipped to the 24-bit state."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    if x.shape[1] != net.n_inputs:
        raise EdgesmithError(f"inputs have {x.shape[1]} features but the netx network takes {net.n_inputs}.",
                             "reshape the inputs to the model's input shape.")
    lim = net.input_limit
    return np.clip(np.rint(net.input_weight * x + net.input_bias), -lim, lim).astype(np.int64)


def encode(net: NetxNet, x_int: np.ndarray) -> np.ndarray:
    """(n_in, N * steps) int64 messages of the host-side Delta encoder, each sample held for its window."""
    x_int = np.asarray(x_int, np.int64)
    n, n_in = x_int.shape
    steps = net.steps_per_sample
    vth = net.input_vth * SCALE
    out = np.zeros((n_in, n * steps), np.int64)
    act = np.zeros(n_in, np.int64)
    residue = np.zeros(n_in, np.int64)
    for i in range(n):
        level = x_int[i] * SCALE
        for s in range(steps):
            delta = level - act + residue
            spike = np.where(np.abs(delta) >= vth, delta, 0)
            residue = delta - spike
            act = level
            out[:, i * steps + s] = spike >> STATE_EXP
    return out


def window_outputs(net: NetxNet, out_messages: np.ndarray) -> np.ndarray:
    """(n_out, T) output-layer messages -> (N, n_out) integers read at each window's last step."""
    steps = net.steps_per_sample
    vals = out_messages if net.layers[-1].sigma_output else np.cumsum(out_messages.astype(np.int64), axis=1)
    return np.asarray(vals[:, steps - 1 :: steps], np.int64).T


def activity_counts(net: NetxNet, in_messages: np.ndarray, layer_messages: list[np.ndarray]) -> dict:
    """Synops, neuron updates and messages of one run (the Lava runtime reports the same, from Lava's messages)."""
    steps = in_messages.shape[1]
    per_layer, prev = [], in_messages
    for lyr, msg in zip(net.layers, layer_messages):
        fan_out = np.count_nonzero(lyr.lava_weight, axis=0)
        nz = prev != 0
        per_layer.append({
            "name": lyr.name, "neuron": lyr.neuron,
            "neurons": int(lyr.n_out), "synapses": int(fan_out.sum()), "dense_synapses": int(lyr.lava_weight.size),
            "in_messages": int(nz.sum()),
            "synops": int(fan_out @ nz.sum(axis=1)), "neuron_updates": int(lyr.n_out * steps),
            "messages": int(np.count_nonzero(msg)), "max_abs_message": int(np.abs(msg).max(initial=0)),
        })
        prev = msg
    input_messages = int(np.count_nonzero(in_messages))
    if net.cuba:  # the last n_layers steps only drain the layers' delays: a window per sample is the time it takes
        steps -= net.n_layers
    return {"synops": sum(p["synops"] for p in per_layer),
            "neuron_updates": sum(p["neuron_updates"] for p in per_layer),
            "messages": input_messages + sum(p["messages"] for p in per_layer),
            "input_messages": input_messages, "timesteps": int(steps), "per_layer": per_layer}


@dataclass
class SimResult:
    outputs: np.ndarray  # (N, n_out) int64 at each window's end
    layer_messages: list[np.ndarray]  # per layer (n_l, T) messages sent
    in_messages: np.ndarray  # (n_in, T) the encoder's messages
    stats: dict


def simulate(net: NetxNet, x_int: np.ndarray) -> SimResult:
    """Run integer inputs (N, n_in) through the network exactly as Lava's fixed-point models do."""
    if net.cuba:
        return _simulate_cuba(net, x_int)
    in_msg = encode(net, x_int)
    steps = in_msg.shape[1]
    shapes = [lyr.n_out for lyr in net.layers]
    bias = [lyr.bias * SCALE for lyr in net.layers]
    vth = [lyr.vth * SCALE for lyr in net.layers]
    a_buff = [np.zeros(n, np.int64) for n in shapes]
    sigma = [np.zeros(n, np.int64) for n in shapes]
    act = [np.zeros(n, np.int64) for n in shapes]
    residue = [np.zeros(n, np.int64) for n in shapes]
    msgs = [np.zeros((n, steps), np.int64) for n in shapes]
    peak = {"accumulator": 0, "state": 0}
    for t in range(steps):
        s_prev = in_msg[:, t]
        for i, lyr in enumerate(net.layers):
            a_in = a_buff[i]
            if s_prev.any():
                acc = lyr.lava_weight @ s_prev
                peak["accumulator"] = max(peak["accumulator"], int(np.abs(acc).max()))
                e = lyr.weight_exp
                a_buff[i] = acc << e if e > 0 else acc >> -e
            else:
                a_buff[i] = np.zeros(shapes[i], np.int64)
            sigma[i] = sigma[i] + a_in
            if lyr.sigma_output:
                out = sigma[i].copy()
                peak["state"] = max(peak["state"], int(np.abs(sigma[i]).max(initial=0)))
            else:
                new_act = np.maximum(sigma[i] + bias[i], 0)
                delta = new_act - act[i] + residue[i]
                spike = np.where(np.abs(delta) >= vth[i], delta, 0)
                residue[i] = delta - spike
                act[i] = new_act
                peak["state"] = max(peak["state"], int(np.abs(sigma[i]).max(initial=0)),
                                    int(np.abs(new_act).max(initial=0)))
                out = spike >> STATE_EXP
            msgs[i][:, t] = out
            s_prev = out
    stats = activity_counts(net, in_msg, msgs)
    hidden = [p for p, lyr in zip(stats["per_layer"], net.layers) if not lyr.sigma_output]
    stats["overflow"] = {
        "int32_accumulator": peak["accumulator"] >= INT32,
        "state_24bit": peak["state"] >= 2 ** (STATE_BITS - 1),
        "message_width": any(p["max_abs_message"] >= 2 ** (MESSAGE_BITS - 1) for p in hidden),
    }
    stats["peak_state"] = peak["state"]
    return SimResult(window_outputs(net, msgs[-1]), msgs, in_msg, stats)


def descale(net: NetxNet, out_int: np.ndarray) -> np.ndarray:
    """Integer outputs -> floats: times the output scale, plus the host-side output bias."""
    return np.asarray(out_int, np.float64) * net.output_scale + net.output_bias


def run_float(net: NetxNet, x: np.ndarray) -> tuple[np.ndarray, dict]:
    """Quantize float inputs, simulate, de-scale: what the Lava runtime returns."""
    res = simulate(net, quantize_inputs(net, x))
    return descale(net, res.outputs), res.stats
