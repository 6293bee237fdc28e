"""The bit-exact NumPy model of a netx network in Lava, as a runtime.

It computes what the Lava simulator computes for a netx file (same integers, same activity counts)
in-process and orders of magnitude faster, so it is the reference a Lava run is checked against and
the fast path for sweeps.
"""
from __future__ import annotations

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.runtimes.base import Runtime, register_runtime
from edgesmith.compress.netx_format import NetxNet, descale, quantize_inputs, simulate


@register_runtime
class NetxReference(Runtime):
    name = "netx-ref"
    contract_fixture = "sigma-delta"
    formats = ("netx",)
    description = "bit-exact NumPy model of a netx Sigma-Delta network as Lava's fixed-point models run it"

    def _load(self, artifact: Artifact) -> None:
        self.net_ = NetxNet.load(artifact.path)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        res = simulate(self.net_, quantize_inputs(self.net_, x.reshape(len(x), -1)))
        return ({"output": descale(self.net_, res.outputs).astype(np.float32), "output_int": res.outputs},
                {**res.stats, "threads": 1})
