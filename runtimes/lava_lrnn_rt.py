"""Out-of-process Lava run of the fixed-point S5 denoiser (``runtimes/lava_lrnn_worker.py``).

Same pattern as ``runtimes/lava_rt.py``: write the network and one clip's integer inputs to a
temporary IN.npz, run the worker with the Lava env's Python, read the traces back. Activity counts
are computed here from Lava's own traces with ``runtimes.lrnn_ref.activity_counts``, so the counts
fed to the Loihi 2 cost model describe what the simulation did.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.runtimes.base import Runtime, register_runtime
from edgesmith.runtimes.lava_rt import lava_available, run_worker
from edgesmith.runtimes.lrnn_ref import activity_counts

WORKER = Path(__file__).resolve().parent / "lava_lrnn_worker.py"


def run_lava(net: dict, u: np.ndarray, timeout_s: float = 900.0) -> dict:
    """One clip of integer frames (T, 257) through Lava: traces like ``lrnn_ref.run`` plus ``stats``
    (``run_worker`` refuses a missing or unrunnable Lava env with the fix)."""
    u = np.asarray(u, np.int64)
    out, wall = run_worker(WORKER, {**net, "inputs_int": u}, timeout_s=timeout_s, what=f"{len(u)} frames",
                           too_long_fix="simulate a shorter clip or raise timeout_s.")
    res = {k: out[k] for k in ("mask", "h_enc", "x", "y", "h")}
    stats = json.loads(str(out["stats_json"]))
    stats.update(activity_counts(net, u, res), worker_wall_s=wall)
    res["stats"] = stats
    return res


# --- as a runtime -------------------------------------------------------------------------------------



@register_runtime
class LavaLrnnRuntime(Runtime):
    """Feature clips (clips, frames, 257) -> masks, one Lava run per clip; ``timeout_s`` bounds each run."""

    name = "lava-lrnn"
    contract_fixture = "lrnn-fixed"
    formats = ("lava",)
    description = "Lava 0.10 Loihi2SimCfg(fixed_pt): S5 denoiser with a custom complex-recurrence process model"
    bit_exact_reference = "lrnn-ref"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return lava_available()

    def _load(self, artifact: Artifact) -> None:
        from edgesmith.compress.lrnn.fixed import load_net

        self.net_ = load_net(artifact.path)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        from edgesmith.compress.lrnn.fixed import quantize_features

        u = quantize_features(self.net_, x)
        masks, total = [], {"synops": 0, "neuron_updates": 0, "messages": 0, "timesteps": 0, "sim_wall_s": 0.0}
        for clip in u:
            res = run_lava(self.net_, clip, float(self.options.get("timeout_s", 900)))
            masks.append(res["mask"])
            for k in total:
                total[k] += res["stats"][k]
        total["steps_per_s"] = total["timesteps"] / total["sim_wall_s"] if total["sim_wall_s"] else None
        return (np.stack(masks) * float(self.net_["mask_scale"])).astype(np.float32), {
            **total, "threads": "n/a (Lava simulator)"}
