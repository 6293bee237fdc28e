"""Run a netx HDF5 network in Lava's Loihi 2 simulator (fixed-point models), loaded by lava-dl's netx.

    .venv-lava/bin/python runtimes/lava_worker.py IN.npz OUT.npz

A standalone script for the Python 3.10 Lava env: it imports only numpy and lava / lava-dl (never the
edgesmith packages, which need Python 3.11). IN.npz holds ``net_path`` (the .net file),
``in_messages`` (n_in, T) int32 (the host-side Delta encoder's graded spikes, computed by
compress/netx_format.py) and ``sparse`` (load dense layers as Sparse synapses); for CUBA networks also
``reset_interval`` (netx's LIFReset window) and ``probe_v`` (record the last layer's voltage).

The network is ``lava.lib.dl.netx.hdf5.Network(net_path, skip_layers=1)``: netx's Input block has no
input port, so the encoder's messages go straight into the first dense layer. A source RingBuffer
sends column t of ``in_messages`` at step t; every layer's output also feeds a sink, so all messages
are recorded for the activity counts (computed by the caller, with the reference's code).

OUT.npz: ``layer_messages_{i}`` (n_i, T) int64, ``lava_weight_{i}`` (the weights Lava's Dense
multiplied with), ``stats_json`` (per-layer process types, weight_exp and num_weight_bits as netx set
them, ``sim_wall_s``, ``build_wall_s``) and, when probed, ``last_v`` (n, T) int64: the last layer's voltage. On
failure the script prints the error as its last stderr
line and exits 1.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np


def run(net_path: str, in_messages: np.ndarray, sparse: bool, reset_interval: int = 0,
        probe_v: bool = False) -> tuple[list, list, dict, np.ndarray | None]:
    from lava.lib.dl import netx
    from lava.magma.core.run_conditions import RunSteps
    from lava.magma.core.run_configs import Loihi2SimCfg
    from lava.proc.io.sink import RingBuffer as Sink
    from lava.proc.io.source import RingBuffer as Source

    t0 = time.perf_counter()
    # graded input messages (16 bits) go straight into the first dense layer; CUBA networks reset every window
    net = netx.hdf5.Network(net_config=net_path, skip_layers=1, sparse_fc_layer=sparse, input_message_bits=16,
                            reset_interval=reset_interval or None)
    total = in_messages.shape[1]
    monitor = None
    if probe_v:  # a non-spiking readout: its membrane voltage is the output
        from lava.proc.monitor.process import Monitor

        monitor = Monitor()
        monitor.probe(net.layers[-1].neuron.v, total)
    source = Source(data=in_messages.astype(np.int32))
    source.s_out.connect(net.inp)
    sinks = []
    for layer in net.layers:
        sink = Sink(shape=layer.out.shape, buffer=total)
        layer.out.connect(sink.a_in)
        sinks.append(sink)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        source.run(condition=RunSteps(num_steps=total),
                   run_cfg=Loihi2SimCfg(select_tag="fixed_pt", select_sub_proc_model=True))
        sim_s = time.perf_counter() - t1
        messages = [np.rint(s.data.get()).astype(np.int64) for s in sinks]
        last_v = None
        if monitor is not None:
            data = monitor.get_data()
            (per_proc,) = data.values()
            last_v = np.asarray(per_proc["v"], np.int64).reshape(total, -1).T
        weights = [np.asarray(layer.synapse.weights.get().todense() if sparse else layer.synapse.weights.get(),
                              np.int64) for layer in net.layers]
    finally:
        source.stop()
    stats = {
        "layers": [{"block": type(layer).__name__, "synapse": type(layer.synapse).__name__,
                    "neuron": type(layer.neuron).__name__,
                    "weight_exp": int(layer.synapse.proc_params.get("weight_exp", 0)),
                    "num_weight_bits": int(layer.synapse.proc_params.get("num_weight_bits", 8))}
                   for layer in net.layers],
        "sim_wall_s": sim_s, "build_wall_s": build_s, "steps_per_s": total / sim_s if sim_s > 0 else None,
    }
    return messages, weights, stats, last_v


def save(path: str, messages: list, weights: list, stats: dict, last_v: np.ndarray | None = None) -> None:
    """Write OUT.npz atomically: a reader never sees a half-written file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".lava_out.", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            extra = {} if last_v is None else {"last_v": last_v}
            np.savez(f, stats_json=np.array(json.dumps(stats)), **extra,
                     **{f"layer_messages_{i}": m for i, m in enumerate(messages)},
                     **{f"lava_weight_{i}": w for i, w in enumerate(weights)})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list) -> int:
    if len(argv) != 3:
        print("usage: lava_worker.py IN.npz OUT.npz", file=sys.stderr)
        return 2
    try:
        with np.load(argv[1], allow_pickle=False) as z:
            net_path, in_messages, sparse = str(z["net_path"]), z["in_messages"], bool(z["sparse"])
            reset = int(z["reset_interval"]) if "reset_interval" in z else 0
            probe_v = bool(z["probe_v"]) if "probe_v" in z else False
        messages, weights, stats, last_v = run(net_path, in_messages, sparse, reset, probe_v)
        save(argv[2], messages, weights, stats, last_v)
    except Exception as e:  # reported to the parent process as the last stderr line
        import traceback

        traceback.print_exc()
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"lava worker failed: {type(e).__name__}: {msg[:400]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
