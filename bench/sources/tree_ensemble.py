"""A GBRL tree ensemble saved by edgesmith (``GBTEnsemble.save``, an .npz), deployed as a tree-policy with
fidelity to the engine's outputs on the user's observations (``--eval-data``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgesmith.bench.sources.base import ModelSource, UserRequest, register_source


def _is_tree_ensemble(path: Path) -> bool:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {"meta", "features", "thresholds", "leaves"} <= set(z.files)
    except Exception:  # not an npz, or an npz of something else
        return False


@register_source
class TreeEnsembleSource(ModelSource):
    name = "tree-ensemble"
    description = "a GBRL tree ensemble saved by edgesmith (GBTEnsemble.save, .npz), tree-policy"

    def matches(self, spec: str) -> bool:
        return Path(spec).suffix == ".npz" and _is_tree_ensemble(Path(spec))

    def load(self, spec: str, request: UserRequest):
        from edgesmith.models.gbrl.ensemble import GBTEnsemble
        from edgesmith.models.user import UserModel
        from edgesmith.models.user_data import TensorSpec, load_tensors

        ens = GBTEnsemble.load(spec)
        specs = [TensorSpec("observation", "float32", (ens.input_dim,))]
        cal = load_tensors(request.calibration_data, specs, "calibration data") if request.calibration_data else None
        ev = load_tensors(request.eval_data, specs, "evaluation data", request.labels) if request.eval_data else None
        return UserModel(label=Path(spec).name, kind="tree-policy", native_format="trees", module=ens, inputs=specs,
                         calibration=cal, evaluation=ev, metric=request.metric, reference=ens.predict,
                         notes=(f"{ens.n_trees} trees, {ens.input_dim} inputs -> {ens.output_dim} outputs",),
                         seed=request.seed)
