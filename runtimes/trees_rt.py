"""The Numba tree engine itself as a runtime: runs a ``trees`` artifact (a ``GBTEnsemble``)."""
from __future__ import annotations

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError
from edgesmith.runtimes.base import Runtime, register_runtime


@register_runtime
class TreesRuntime(Runtime):
    name = "trees"
    contract_fixture = "trees"
    formats = ("trees",)
    description = "edgesmith's Numba GBT engine (serial below 32 rows, threaded above)"

    def _load(self, artifact: Artifact) -> None:
        if not hasattr(artifact.module, "predict") or not hasattr(artifact.module, "input_dim"):
            raise EdgesmithError(f"{artifact.describe()} does not hold a tree ensemble.",
                                 "pass a trees artifact whose module is a models.gbrl.GBTEnsemble.")
        self.ens_ = artifact.module

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        import numba

        if self.threads:
            numba.set_num_threads(min(int(self.threads), numba.config.NUMBA_NUM_THREADS))
        return self.ens_.predict(x), {"threads": numba.get_num_threads(), "n_trees": self.ens_.n_trees}
