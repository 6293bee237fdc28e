"""Run an edgesmith fixed-point Sigma-Delta network in Lava's Loihi 2 simulator (fixed_pt models).

    .venv-lava/bin/python runtimes/lava_worker.py IN.npz OUT.npz

A standalone script for the Python 3.10 Lava env: it imports only numpy, scipy and lava (never the
edgesmith packages, which need Python 3.11 and torch). IN.npz holds the network arrays written by
compress/export_lava.py plus ``inputs_int`` (N, n_in) int32, the already-quantized samples.

Graph: source RingBuffer -> (Dense|Sparse -> SigmaDelta) * L, every SigmaDelta's s_out also feeding
its own sink RingBuffer, so the spikes of every layer are recorded for the activity counts. Samples
are time-multiplexed: sample i's input delta is sent on the first step of its window and its output
is the running sum of the last layer's spikes at the window's end.

OUT.npz: ``outputs`` (N, n_out) int64, ``layer_spikes_{i}`` (n_i, T) int64, ``stats_json`` (counts
as in runtimes/sigma_delta_ref.py plus ``sim_wall_s`` and ``build_wall_s``). On failure the script
prints the error as its last stderr line and exits 1.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np

LAVA_WEIGHT_FACTOR = 2  # Lava's mixed-sign 8-bit synapses are even integers: q -> 2 q


def load_network(path: str) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def input_spike_train(x_int: np.ndarray, steps: int) -> np.ndarray:
    n, n_in = x_int.shape
    data = np.zeros((n_in, n * steps), np.int32)
    prev = np.vstack([np.zeros((1, n_in), np.int64), x_int[:-1].astype(np.int64)])
    data[:, ::steps] = (x_int.astype(np.int64) - prev).T
    return data


def effective_fan_out(q: np.ndarray) -> np.ndarray:
    """Nonzero synapses per input (column) after Lava's 8-bit clip and mixed-sign truncation."""
    from lava.utils.weightutils import clip_weights, determine_sign_mode, truncate_weights

    w = LAVA_WEIGHT_FACTOR * q.astype(np.int32)
    mode = determine_sign_mode(w)
    w = truncate_weights(clip_weights(w, mode, num_bits=8), mode, 8)
    return np.count_nonzero(w, axis=0)


def counts(net: dict, in_spikes: np.ndarray, layer_spikes: list) -> dict:
    steps = in_spikes.shape[1]
    names = [str(s) for s in net["layer_names"]]
    per_layer, prev = [], in_spikes
    for i, spk in enumerate(layer_spikes):
        q = net[f"weights_{i}"]
        fan_out = effective_fan_out(q)
        nz = prev != 0
        per_layer.append({
            "name": names[i], "connection": "sparse" if bool(net["sparse"][i]) else "dense",
            "synapses": int(fan_out.sum()), "in_messages": int(nz.sum()),
            "synops": int(fan_out @ nz.sum(axis=1)), "neuron_updates": int(q.shape[0] * steps),
            "messages": int(np.count_nonzero(spk)), "max_abs_message": int(np.abs(spk).max(initial=0)),
        })
        prev = spk
    input_messages = int(np.count_nonzero(in_spikes))
    return {"synops": sum(p["synops"] for p in per_layer),
            "neuron_updates": sum(p["neuron_updates"] for p in per_layer),
            "messages": input_messages + sum(p["messages"] for p in per_layer),
            "input_messages": input_messages, "timesteps": int(steps), "per_layer": per_layer}


def run(net: dict, x_int: np.ndarray) -> tuple[np.ndarray, list, dict]:
    from scipy.sparse import csr_matrix

    from lava.magma.core.run_conditions import RunSteps
    from lava.magma.core.run_configs import Loihi2SimCfg
    from lava.proc.dense.process import Dense
    from lava.proc.io.sink import RingBuffer as Sink
    from lava.proc.io.source import RingBuffer as Source
    from lava.proc.sdn.process import ActivationMode, SigmaDelta
    from lava.proc.sparse.process import Sparse

    t0 = time.perf_counter()
    steps = int(net["timesteps_per_sample"])
    n_layers = int(net["n_layers"])
    bits = int(net["activation_bits"])
    in_spikes = input_spike_train(x_int, steps)
    total = in_spikes.shape[1]
    source = Source(data=in_spikes)
    port, sinks = source.s_out, []
    for i in range(n_layers):
        w = LAVA_WEIGHT_FACTOR * net[f"weights_{i}"].astype(np.int32)
        kw = dict(num_message_bits=bits, weight_exp=int(net["weight_exp"][i]), num_weight_bits=8)
        conn = Sparse(weights=csr_matrix(w), **kw) if bool(net["sparse"][i]) else Dense(weights=w, **kw)
        n_out = w.shape[0]
        neuron = SigmaDelta(shape=(n_out,), vth=int(net["vth"][i]), bias=net[f"bias_{i}"].astype(np.int32),
                            act_mode=ActivationMode.RELU if bool(net["relu"][i]) else ActivationMode.UNIT,
                            cum_error=bool(net["cum_error"][i]), spike_exp=int(net["spike_exp"][i]),
                            state_exp=int(net["state_exp"][i]))
        sink = Sink(shape=(n_out,), buffer=total)
        port.connect(conn.s_in)
        conn.a_out.connect(neuron.a_in)
        neuron.s_out.connect(sink.a_in)
        port = neuron.s_out
        sinks.append(sink)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        source.run(condition=RunSteps(num_steps=total), run_cfg=Loihi2SimCfg(select_tag="fixed_pt"))
        sim_s = time.perf_counter() - t1
        layer_spikes = [np.rint(s.data.get()).astype(np.int64) for s in sinks]
    finally:
        source.stop()
    outputs = np.cumsum(layer_spikes[-1], axis=1)[:, steps - 1 :: steps].T
    stats = counts(net, in_spikes, layer_spikes)
    stats.update(sim_wall_s=sim_s, build_wall_s=build_s, steps_per_s=total / sim_s if sim_s > 0 else None)
    return outputs, layer_spikes, stats


def save(path: str, outputs: np.ndarray, layer_spikes: list, stats: dict) -> None:
    """Write OUT.npz atomically: a reader never sees a half-written file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".lava_out.", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, outputs=outputs, stats_json=np.array(json.dumps(stats)),
                     **{f"layer_spikes_{i}": s for i, s in enumerate(layer_spikes)})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list) -> int:
    if len(argv) != 3:
        print("usage: lava_worker.py IN.npz OUT.npz", file=sys.stderr)
        return 2
    try:
        net = load_network(argv[1])
        x_int = net.pop("inputs_int")
        outputs, layer_spikes, stats = run(net, x_int)
        save(argv[2], outputs, layer_spikes, stats)
    except Exception as e:  # reported to the parent process as the last stderr line
        import traceback

        traceback.print_exc()
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"lava worker failed: {type(e).__name__}: {msg[:400]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
