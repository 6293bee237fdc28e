"""A NIR graph's own float semantics as a runtime: forward Euler at ``dt`` on the window schedule.

The reference a NIR graph's fixed-point Lava deployment is compared with (``compress/nir_graph.py``);
``dt`` and ``steps`` come from the artifact's ``nir`` meta (set by the NIR model source), else the
runtime's options, else 1e-4 s and 16 steps.
"""
from __future__ import annotations

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.compress.import_nir import DEFAULT_DT, DEFAULT_STEPS
from edgesmith.compress.nir_graph import load_chain, simulate_float
from edgesmith.runtimes.base import Runtime, register_runtime


@register_runtime
class NirFloat(Runtime):
    name = "nir-float"
    contract_fixture = "nir-graph"
    formats = ("nir",)
    description = "float NumPy simulation of a NIR graph (LIF, CubaLIF, IF, LI, I; forward Euler)"

    def _load(self, artifact: Artifact) -> None:
        self.chain_ = load_chain(artifact.path)
        meta = artifact.meta.get("nir") or {}
        self.dt_ = float(meta.get("dt", self.options.get("dt", DEFAULT_DT)))
        self.steps_ = int(meta.get("steps", self.options.get("steps", DEFAULT_STEPS)))

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        out, stats = simulate_float(self.chain_, x.reshape(len(x), -1), self.dt_, self.steps_)
        return out.astype(np.float32), {**stats, "threads": 1, "dt": self.dt_, "steps": self.steps_}
