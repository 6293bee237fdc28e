"""Out-of-process Lava run of the fixed-point S5 denoiser (``runtimes/lava_lrnn_worker.py``).

Same pattern as ``runtimes/lava_rt.py``: write the network and one clip's integer inputs to a
temporary IN.npz, run the worker with the Lava env's Python, read the traces back. Activity counts
are computed here from Lava's own traces with ``runtimes.lrnn_ref.activity_counts``, so the counts
fed to the Loihi 2 cost model describe what the simulation did.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from compress.base import Artifact
from models.common import EdgesmithError
from runtimes.base import Runtime, register_runtime
from runtimes.lava_rt import ENV_VAR, _last_line, lava_python
from runtimes.lrnn_ref import activity_counts

WORKER = Path(__file__).resolve().parent / "lava_lrnn_worker.py"


def lava_available() -> tuple[bool, str]:
    py = lava_python()
    if not py.exists():
        return False, (f"the Lava Python 3.10 env was not found at {py}; run `make setup` or point {ENV_VAR} "
                       "at an env with lava-nc 0.10.")
    return True, ""


def run_lava(net: dict, u: np.ndarray, timeout_s: float = 900.0) -> dict:
    """One clip of integer frames (T, 257) through Lava: traces like ``lrnn_ref.run`` plus ``stats``."""
    ok, why = lava_available()
    if not ok:
        raise EdgesmithError(why, "build .venv-lava with `make setup`.")
    u = np.asarray(u, np.int64)
    with tempfile.TemporaryDirectory(prefix="edgesmith-lava-lrnn-") as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        with open(src, "wb") as f:
            np.savez(f, **{k: v for k, v in net.items()}, inputs_int=u)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([str(lava_python()), str(WORKER), str(src), str(dst)], capture_output=True,
                                  text=True, timeout=timeout_s, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise EdgesmithError(f"the Lava simulation of {len(u)} frames ran past {timeout_s:.0f} s.",
                                 "simulate a shorter clip or raise timeout_s.") from None
        if proc.returncode != 0 or not dst.exists():
            raise EdgesmithError(f"the Lava LRNN worker failed: {_last_line(proc.stderr)}",
                                 "check .venv-lava (lava-nc 0.10, `make setup`) and re-run the conversion.")
        with np.load(dst, allow_pickle=False) as z:
            res = {k: z[k] for k in ("mask", "h_enc", "x", "y", "h")}
            stats = json.loads(str(z["stats_json"]))
    stats.update(activity_counts(net, u, res), worker_wall_s=time.perf_counter() - t0)
    res["stats"] = stats
    return res


# --- as a runtime -------------------------------------------------------------------------------------



@register_runtime
class LavaLrnnRuntime(Runtime):
    """Feature clips (clips, frames, 257) -> masks, one Lava run per clip; ``timeout_s`` bounds each run."""

    name = "lava-lrnn"
    formats = ("lava",)
    description = "Lava 0.10 Loihi2SimCfg(fixed_pt): S5 denoiser with a custom complex-recurrence process model"
    bit_exact_reference = "lrnn-ref"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return lava_available()

    def _load(self, artifact: Artifact) -> None:
        from compress.lrnn.fixed import load_net

        self.net_ = load_net(artifact.path)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        from compress.lrnn.fixed import quantize_features

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
