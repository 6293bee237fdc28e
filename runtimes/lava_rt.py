"""Lava (Loihi 2 simulator, fixed-point models): runs a netx HDF5 Sigma-Delta network with lava-dl's netx.

Lava 0.10 and lava-dl 0.6 need Python 3.10, so the simulation runs out of process: this runtime
quantizes the inputs and delta-encodes them (``compress/netx_format.py``), writes the messages to a
temporary IN.npz, runs ``runtimes/lava_worker.py`` with the Lava env's Python (``.venv-lava/bin/python``
in the repo root, or ``EDGESMITH_LAVA_PYTHON``), which loads the file with
``netx.hdf5.Network``, and reads back every layer's messages. Outputs and activity counts (synops,
neuron updates, messages: what a Loihi cost model needs) come from those messages, with the same
code the in-process reference (``netx-ref``) uses.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError, lava_available, run_in_lava_env, scratch_dir
from edgesmith.runtimes.base import Runtime, register_runtime
from edgesmith.compress import netx_format as netx_ref

WORKER = Path(__file__).resolve().parent / "lava_worker.py"


def run_worker(worker: Path, arrays: dict, *, timeout_s: float, what: str, too_long_fix: str) -> tuple[dict, float]:
    """Run a Lava worker script in the Lava env on ``arrays`` (saved as IN.npz); return OUT.npz's arrays and wall time.

    Every failure is a user-facing ``EdgesmithError``: a run past ``timeout_s``, or a worker that exits
    non-zero or writes nothing (its last stderr line is quoted).
    """
    with scratch_dir("lava") as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        with open(src, "wb") as f:
            np.savez(f, **arrays)
        wall = run_in_lava_env(worker, [str(src), str(dst)], timeout_s=timeout_s, cwd=tmp,
                               what=f"the Lava simulation of {what}", too_long_fix=too_long_fix,
                               failed_fix="check that .venv-lava has lava-nc 0.10 and lava-dl 0.6 (run `make setup`) "
                                          "and that the model was written by its export pass.",
                               expect=dst)
        with np.load(dst, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}, wall


@register_runtime
class LavaRuntime(Runtime):
    """Options: ``timeout_s`` (default 600) bounds one simulation; ``sparse`` (default: when a layer is more
    than half zeros) loads dense layers as Lava Sparse synapses; ``threads`` is not used."""

    name = "lava"
    contract_fixture = "sigma-delta"
    formats = ("netx",)
    description = "Lava 0.10 Loihi2SimCfg(select_tag='fixed_pt'), netx network loaded by lava-dl 0.6, out of process"
    bit_exact_reference = "netx-ref"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return lava_available()

    def _load(self, artifact: Artifact) -> None:
        self.net_ = netx_ref.NetxNet.load(artifact.path)
        self.path_ = str(Path(artifact.path).resolve())

    def _check_shape(self, x: np.ndarray) -> None:
        super()._check_shape(x)
        if int(np.prod(x.shape[1:])) != self.net_.n_inputs:
            raise EdgesmithError(f"input has {int(np.prod(x.shape[1:]))} features per sample but the Lava network "
                                 f"takes {self.net_.n_inputs}.", "reshape the input to the model's input shape.")

    def _sparse(self) -> bool:
        opt = self.options.get("sparse")
        if opt is not None:
            return bool(opt)
        return any(np.mean(lyr.lava_weight == 0) > 0.5 for lyr in self.net_.layers)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        ok, why = self.available()
        if not ok:
            problem, _, fix = why.partition(" Fix: ")
            raise EdgesmithError(problem, fix or None)
        net = self.net_
        in_msg = netx_ref.lava_inputs(net, netx_ref.quantize_inputs(net, x))
        sparse = self._sparse()
        out, worker_s = run_worker(WORKER, {"net_path": np.array(self.path_), "in_messages": in_msg.astype(np.int32),
                                            "sparse": np.array(sparse),
                                            "reset_interval": np.array(net.window if net.cuba else 0),
                                            "probe_v": np.array(net.readout == "voltage")},
                                   timeout_s=float(self.options.get("timeout_s", 600)), what=f"{len(x)} samples",
                                   too_long_fix="run fewer samples at a time or raise the runtime's timeout_s.")
        messages = [out[f"layer_messages_{i}"] for i in range(net.n_layers)]
        worker = json.loads(str(out["stats_json"]))
        # netx sized the weights itself: the reference's model of that must have built the same synapses
        same = all(np.array_equal(out[f"lava_weight_{i}"], lyr.lava_weight)
                   and worker["layers"][i]["weight_exp"] == lyr.weight_exp for i, lyr in enumerate(net.layers))
        stats = netx_ref.activity_counts(net, in_msg, messages)
        stats.update(worker_wall_s=worker_s, samples=len(x), timesteps_per_sample=net.steps_per_sample,
                     sparse_synapses=sparse, lava_layers=worker["layers"], sim_wall_s=worker["sim_wall_s"],
                     build_wall_s=worker["build_wall_s"], steps_per_s=worker["steps_per_s"],
                     reference_weights_match=bool(same), threads="n/a (Lava simulator)")
        last_v = out["last_v"] if "last_v" in out else None  # the voltage readout's trace, when probed
        out_int = netx_ref.lava_outputs(net, messages, last_v)
        return {"output": netx_ref.descale(net, out_int).astype(np.float32), "output_int": out_int}, stats
