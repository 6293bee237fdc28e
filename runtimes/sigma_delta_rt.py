"""The bit-exact NumPy model of a Lava Sigma-Delta network, as a runtime.

It computes what the Lava simulator computes (same integers, same activity counts) in-process and
orders of magnitude faster, so it serves as the reference a Lava run is checked against and as the
fast path for sweeps.
"""
from __future__ import annotations

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.runtimes.base import Runtime, register_runtime
from edgesmith.runtimes.sigma_delta_ref import SigmaDeltaNet, run_float


@register_runtime
class SigmaDeltaReference(Runtime):
    name = "sigma-delta-ref"
    contract_fixture = "sigma-delta"
    formats = ("lava",)
    description = "bit-exact NumPy model of the fixed-point Sigma-Delta network (Lava's reference)"

    def _load(self, artifact: Artifact) -> None:
        self.net_ = SigmaDeltaNet.load(artifact.path)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        out, stats = run_float(self.net_, x.reshape(len(x), -1))
        return out.astype(np.float32), {**stats, "threads": 1}
