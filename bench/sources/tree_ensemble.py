"""A GBRL tree ensemble saved by edgesmith (``GBTEnsemble.save``, an .npz), deployed as a tree-policy with
fidelity to the engine's outputs on the user's observations (``--eval-data``)."""
from __future__ import annotations

from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, register_source, synthetic_evaluation


@register_source
class TreeEnsembleSource(ModelSource):
    name = "tree-ensemble"
    description = "a GBRL tree ensemble saved by edgesmith (GBTEnsemble.save, .npz), tree-policy"

    def matches(self, spec: str) -> bool:
        # the one source of .npz models: a file that is not an ensemble (data given as the model) is told why
        return Path(spec).suffix == ".npz" and Path(spec).is_file()

    def load(self, spec: str, request: UserRequest):
        from edgesmith.models.gbrl.ensemble import GBTEnsemble
        from edgesmith.models.user import UserModel
        from edgesmith.models.user_data import TensorSpec, load_tensors

        ens = GBTEnsemble.load(spec)
        specs = [TensorSpec("observation", "float32", (ens.input_dim,))]
        cal = load_tensors(request.calibration_data, specs, "calibration data") if request.calibration_data else None
        ev = load_tensors(request.eval_data, specs, "evaluation data", request.labels) if request.eval_data else None
        if cal is None and ev is None:  # no data files: --input-shape's synthetic inputs, if given, score fidelity
            ev = synthetic_evaluation(specs, request)
        return UserModel(label=Path(spec).name, kind="tree-policy", native_format="trees", module=ens, inputs=specs,
                         calibration=cal, evaluation=ev, metric=request.metric, reference=ens.predict,
                         notes=(f"{ens.n_trees} trees, {ens.input_dim} inputs -> {ens.output_dim} outputs",),
                         seed=request.seed)
