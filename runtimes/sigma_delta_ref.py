"""Bit-exact NumPy reference of the fixed-point Sigma-Delta network that ``lava_worker.py`` runs in Lava.

It reproduces, step by step, what Lava 0.10's fixed-point process models (``Loihi2SimCfg(
select_tag='fixed_pt')``) compute, so sweeps and tests need not start the slow simulator:

* source ``RingBuffer``: sends column ``t`` of its int32 data at step ``t``.
* ``Dense``/``Sparse`` (bit-accurate model): weights are clipped to 8 bits and, for mixed signs,
  lose their lowest bit (``lava_weights``); each step it first sends the buffer computed on the
  previous step (one step of delay), then sets ``a_buff = (W . s_in) >> -weight_exp`` (an arithmetic
  shift: floor), or ``<< weight_exp`` when positive.
* ``SigmaDelta`` (fixed): ``sigma += a_in``; ``act = relu(sigma + bias * 2**(spike_exp+state_exp))``
  (or no ReLU in UNIT mode); ``delta = act - act_prev + residue``; the spike is ``delta`` where
  ``|delta| >= vth * 2**(spike_exp+state_exp)`` (``|error|`` with ``cum_error``), else 0;
  ``residue = delta - spike``; it sends ``spike >> state_exp``.

Samples are time-multiplexed: sample ``i`` is presented as the input delta ``x_i - x_{i-1}`` on the
first step of its window of ``timesteps_per_sample`` steps, and its output is the running sum of the
output layer's spikes at the window's last step. State carries over from sample to sample.

Activity counts over all steps: ``synops`` (each nonzero graded spike times the nonzero weights of
its column, i.e. the synapses it drives), ``neuron_updates`` (every SigmaDelta neuron, every step),
``messages`` (nonzero spikes sent, by the input source and by every layer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError

FORMAT_NAME = "edgesmith-lava-sdn"  # the schema written by compress.export_lava
LAVA_WEIGHT_FACTOR = 2
INT32 = 2 ** 31
STATE_BITS = 24


@dataclass
class SigmaDeltaNet:
    """The fixed-point network of a ``model.lava.npz`` file (see compress/export_lava.py for the schema)."""

    weights: list[np.ndarray]  # q, int8 (out, in)
    bias: list[np.ndarray]
    weight_exp: np.ndarray
    vth: np.ndarray
    spike_exp: np.ndarray
    state_exp: np.ndarray
    cum_error: np.ndarray
    relu: np.ndarray
    sparse: np.ndarray
    input_scale: float
    output_scale: float
    steps_per_sample: int
    activation_bits: int
    layer_names: list[str] = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        return len(self.weights)

    @property
    def n_inputs(self) -> int:
        return int(self.weights[0].shape[1])

    @classmethod
    def load(cls, path: str | Path) -> "SigmaDeltaNet":
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["format"]) != FORMAT_NAME:
                    raise KeyError("format")
                n = int(z["n_layers"])
                return cls(
                    weights=[z[f"weights_{i}"] for i in range(n)], bias=[z[f"bias_{i}"] for i in range(n)],
                    weight_exp=z["weight_exp"], vth=z["vth"], spike_exp=z["spike_exp"], state_exp=z["state_exp"],
                    cum_error=z["cum_error"], relu=z["relu"], sparse=z["sparse"],
                    input_scale=float(z["input_scale"]), output_scale=float(z["output_scale"]),
                    steps_per_sample=int(z["timesteps_per_sample"]), activation_bits=int(z["activation_bits"]),
                    layer_names=[str(s) for s in z["layer_names"]],
                )
        except (KeyError, ValueError, OSError) as e:
            raise EdgesmithError(f"{path} is not a valid edgesmith Lava network ({e}).",
                                 "re-run the export-lava pass to write it again.") from None


def lava_weights(w: np.ndarray) -> np.ndarray:
    """The integer weights Lava's fixed-point Dense/Sparse use for the matrix it was given.

    Same rule as lava.utils.weightutils (clip_weights to 8 bits, truncate_weights to 8 bits):
    the sign mode comes from the matrix; mixed signs clip to [-256, 255] and drop the lowest bit
    (-7 becomes -8); all-positive clips to [0, 255]; all-negative to [-255, 0].
    """
    w = np.asarray(w, np.int64)
    if w.min(initial=0) >= 0:
        return np.clip(w, 0, 255)
    if w.max(initial=0) <= 0:
        return -np.clip(-w, 0, 255)
    return (np.clip(w, -256, 255) >> 1) << 1


def quantize_inputs(net: SigmaDeltaNet, x: np.ndarray) -> np.ndarray:
    """Float inputs (N, ...) -> integer graded-spike values (N, n_in), clipped to the payload width."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    if x.shape[1] != net.n_inputs:
        raise EdgesmithError(f"inputs have {x.shape[1]} features but the Lava network takes {net.n_inputs}.",
                             "reshape the inputs to the model's input shape.")
    lim = 2 ** (net.activation_bits - 1) - 1
    return np.clip(np.rint(x / net.input_scale), -lim, lim).astype(np.int32)


def input_spike_train(x_int: np.ndarray, steps_per_sample: int) -> np.ndarray:
    """(n_in, N * steps) int32: sample i's delta x_i - x_{i-1} on the first step of its window."""
    n, n_in = x_int.shape
    data = np.zeros((n_in, n * steps_per_sample), np.int32)
    prev = np.vstack([np.zeros((1, n_in), np.int64), x_int[:-1].astype(np.int64)])
    data[:, ::steps_per_sample] = (x_int.astype(np.int64) - prev).T
    return data


def window_outputs(out_spikes: np.ndarray, steps_per_sample: int) -> np.ndarray:
    """(n_out, T) output spikes -> (N, n_out): their running sum at the last step of each window."""
    total = np.cumsum(out_spikes.astype(np.int64), axis=1)
    return total[:, steps_per_sample - 1 :: steps_per_sample].T


def activity_counts(net: SigmaDeltaNet, in_spikes: np.ndarray, layer_spikes: list[np.ndarray]) -> dict:
    """Synops, neuron updates and messages from every layer's spike train (shared with the Lava worker's logic)."""
    steps = in_spikes.shape[1]
    per_layer = []
    prev = in_spikes
    for i, w in enumerate(net.weights):
        fan_out = np.count_nonzero(lava_weights(LAVA_WEIGHT_FACTOR * w.astype(np.int64)), axis=0)
        nz = prev != 0
        per_layer.append({
            "name": net.layer_names[i] if net.layer_names else str(i),
            "connection": "sparse" if bool(net.sparse[i]) else "dense",
            "synapses": int(fan_out.sum()),
            "in_messages": int(nz.sum()),
            "synops": int(fan_out @ nz.sum(axis=1)),
            "neuron_updates": int(w.shape[0] * steps),
            "messages": int(np.count_nonzero(layer_spikes[i])),
            "max_abs_message": int(np.abs(layer_spikes[i]).max(initial=0)),
        })
        prev = layer_spikes[i]
    input_messages = int(np.count_nonzero(in_spikes))
    return {
        "synops": sum(p["synops"] for p in per_layer),
        "neuron_updates": sum(p["neuron_updates"] for p in per_layer),
        "messages": input_messages + sum(p["messages"] for p in per_layer),
        "input_messages": input_messages,
        "timesteps": int(steps),
        "per_layer": per_layer,
    }


@dataclass
class SimResult:
    outputs: np.ndarray  # (N, n_out) int64, output layer activations at each window end
    layer_spikes: list[np.ndarray]  # per layer (n_l, T) spikes sent
    stats: dict


def simulate(net: SigmaDeltaNet, x_int: np.ndarray) -> SimResult:
    """Run integer inputs (N, n_in) through the network exactly as the Lava fixed-point models do."""
    x_int = np.asarray(x_int)
    in_spikes = input_spike_train(x_int, net.steps_per_sample)
    steps = in_spikes.shape[1]
    w_eff = [lava_weights(LAVA_WEIGHT_FACTOR * w.astype(np.int64)) for w in net.weights]
    scale = [1 << int(net.spike_exp[i] + net.state_exp[i]) for i in range(net.n_layers)]
    bias = [b.astype(np.int64) * scale[i] for i, b in enumerate(net.bias)]
    vth = [int(net.vth[i]) * scale[i] for i in range(net.n_layers)]
    shapes = [w.shape[0] for w in w_eff]
    a_buff = [np.zeros(n, np.int64) for n in shapes]
    sigma = [np.zeros(n, np.int64) for n in shapes]
    act = [np.zeros(n, np.int64) for n in shapes]
    residue = [np.zeros(n, np.int64) for n in shapes]
    error = [np.zeros(n, np.int64) for n in shapes]
    spikes = [np.zeros((n, steps), np.int64) for n in shapes]
    peak = {"accumulator": 0, "state": 0}
    for t in range(steps):
        s_prev = in_spikes[:, t].astype(np.int64)
        for i in range(net.n_layers):
            a_in = a_buff[i]
            if s_prev.any():
                acc = w_eff[i] @ s_prev
                peak["accumulator"] = max(peak["accumulator"], int(np.abs(acc).max()))
                e = int(net.weight_exp[i])
                a_buff[i] = acc << e if e > 0 else acc >> -e
            else:
                a_buff[i] = np.zeros(shapes[i], np.int64)
            sigma[i] = sigma[i] + a_in
            new_act = sigma[i] + bias[i]
            if net.relu[i]:
                new_act = np.maximum(new_act, 0)
            delta = new_act - act[i] + residue[i]
            if net.cum_error[i]:
                error[i] = error[i] + delta
                s_out = np.where(np.abs(error[i]) >= vth[i], delta, 0)
                error[i] = error[i] * (1 - (np.abs(s_out) > 0))
            else:
                s_out = np.where(np.abs(delta) >= vth[i], delta, 0)
            residue[i] = delta - s_out
            act[i] = new_act
            peak["state"] = max(peak["state"], int(np.abs(sigma[i]).max()), int(np.abs(new_act).max()))
            s_prev = s_out >> int(net.state_exp[i])
            spikes[i][:, t] = s_prev
    stats = activity_counts(net, in_spikes, spikes)
    msg_lim = 2 ** (net.activation_bits - 1)
    stats["overflow"] = {
        "int32_accumulator": peak["accumulator"] >= INT32,
        "state_24bit": peak["state"] >= 2 ** (STATE_BITS - 1),
        "message_width": any(p["max_abs_message"] >= msg_lim for p in stats["per_layer"]),
    }
    return SimResult(window_outputs(spikes[-1], net.steps_per_sample), spikes, stats)


def run_float(net: SigmaDeltaNet, x: np.ndarray) -> tuple[np.ndarray, dict]:
    """Quantize float inputs, simulate, and de-scale the outputs: what the Lava runtime returns."""
    res = simulate(net, quantize_inputs(net, x))
    return res.outputs * net.output_scale, res.stats
