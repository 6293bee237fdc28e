"""Lava (Loihi 2 simulator, fixed-point models): runs a ``model.lava.npz`` Sigma-Delta network.

Lava 0.10 needs Python 3.10, so the simulation runs out of process: this runtime quantizes the
inputs, writes them with the network to a temporary IN.npz, runs ``runtimes/lava_worker.py`` with
the Lava env's Python (``.venv-lava/bin/python`` in the repo root, or ``EDGESMITH_LAVA_PYTHON``),
and reads back the output activations and the activity counts (synops, neuron updates, messages)
that a Loihi cost model needs. ``runtimes/sigma_delta_ref.py`` computes the same numbers in-process.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError, run_child
from edgesmith.runtimes.base import Runtime, register_runtime
from edgesmith.runtimes.sigma_delta_ref import SigmaDeltaNet, quantize_inputs

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "lava_worker.py"
ENV_VAR = "EDGESMITH_LAVA_PYTHON"


def lava_python() -> Path:
    """The Lava env's interpreter: $EDGESMITH_LAVA_PYTHON, else .venv-lava/bin/python in the repo root."""
    override = os.environ.get(ENV_VAR)
    return Path(override) if override else REPO_ROOT / ".venv-lava" / "bin" / "python"


def lava_available() -> tuple[bool, str]:
    """Whether the Lava env's interpreter is there and runnable, and if not, what to do."""
    py = lava_python()
    if not py.exists():
        return False, (f"the Lava Python 3.10 env was not found at {py}. Fix: run `make setup` to build "
                       f".venv-lava, or point {ENV_VAR} at the Python of an env with lava-nc 0.10.")
    if not py.is_file() or not os.access(py, os.X_OK):
        return False, (f"{py} is not an executable Python interpreter (a folder, or not executable). Fix: point "
                       f"{ENV_VAR} at the python of an env with lava-nc 0.10 (e.g. .venv-lava/bin/python).")
    return True, ""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:400] if lines else "(no error output)"


def run_worker(worker: Path, arrays: dict, *, timeout_s: float, what: str, too_long_fix: str) -> tuple[dict, float]:
    """Run a Lava worker script in the Lava env on ``arrays`` (saved as IN.npz); return OUT.npz's arrays and wall time.

    Every failure is a user-facing ``EdgesmithError``: a run past ``timeout_s``, or a worker that exits
    non-zero or writes nothing (its last stderr line is quoted).
    """
    with tempfile.TemporaryDirectory(prefix="edgesmith-lava-") as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        with open(src, "wb") as f:
            np.savez(f, **arrays)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        ok, why = lava_available()
        if not ok:
            raise EdgesmithError(why.split(" Fix: ")[0], why.split(" Fix: ")[-1])
        t0 = time.perf_counter()
        try:
            proc = run_child([str(lava_python()), str(worker), str(src), str(dst)], timeout_s=timeout_s, env=env,
                             cwd=tmp)
        except subprocess.TimeoutExpired:
            raise EdgesmithError(f"the Lava simulation of {what} ran past {timeout_s:.0f} s.", too_long_fix) from None
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not dst.exists():
            raise EdgesmithError(f"the Lava worker ({worker.name}) failed: {_last_line(proc.stderr)}",
                                 "check that .venv-lava has lava-nc 0.10 (run `make setup`) and that the "
                                 "model was written by its export pass.")
        with np.load(dst, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}, wall


@register_runtime
class LavaRuntime(Runtime):
    """Options: ``timeout_s`` (default 600) bounds one simulation; ``threads`` is not used."""

    name = "lava"
    contract_fixture = "sigma-delta"
    formats = ("lava",)
    description = "Lava 0.10 Loihi2SimCfg(select_tag='fixed_pt'), Sigma-Delta network, out of process"
    bit_exact_reference = "sigma-delta-ref"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return lava_available()

    def _load(self, artifact: Artifact) -> None:
        self.net_ = SigmaDeltaNet.load(artifact.path)
        with np.load(artifact.path, allow_pickle=False) as z:
            self.arrays_ = {k: z[k] for k in z.files}

    def _check_shape(self, x: np.ndarray) -> None:
        super()._check_shape(x)
        if int(np.prod(x.shape[1:])) != self.net_.n_inputs:
            raise EdgesmithError(f"input has {int(np.prod(x.shape[1:]))} features per sample but the Lava network "
                                 f"takes {self.net_.n_inputs}.", "reshape the input to the model's input shape.")

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        ok, why = self.available()
        if not ok:
            problem, _, fix = why.partition(" Fix: ")
            raise EdgesmithError(problem, fix or None)
        x_int = quantize_inputs(self.net_, x)
        out, worker_s = run_worker(WORKER, {**self.arrays_, "inputs_int": x_int},
                                   timeout_s=float(self.options.get("timeout_s", 600)), what=f"{len(x)} samples",
                                   too_long_fix="run fewer samples at a time or raise the runtime's timeout_s.")
        out_int = out["outputs"]
        stats = json.loads(str(out["stats_json"]))
        stats.update(worker_wall_s=worker_s, samples=len(x), timesteps_per_sample=self.net_.steps_per_sample,
                     threads="n/a (Lava simulator)")
        return (out_int.astype(np.float64) * self.net_.output_scale).astype(np.float32), stats
