"""A NIR graph (``.nir``, written by snnTorch, Norse, Sinabs, Rockpool, SpikingJelly or ``nir.write``) of
LIF-family neurons, deployed to loihi2: ``import-nir`` turns it into a fixed-point netx network of Lava
LIF neurons, which Lava runs and ``netx-ref`` checks bit for bit. The reference is the graph's own float
semantics (forward Euler at ``dt``, ``compress/nir_graph.py``), so the report's fidelity and accuracy
rows show what the fixed-point conversion costs. Options: ``dt`` (the exporting library's step, default
1e-4 s as snnTorch), ``steps`` (time steps each sample is presented for, default 16); a graph written by
edgesmith's ``export-nir`` carries both in its metadata.
"""
from __future__ import annotations

from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, register_source, synthetic_evaluation


@register_source
class NirFileSource(ModelSource):
    name = "nir"
    description = "a NIR graph (.nir) of Affine/Linear transforms and LIF, CubaLIF, IF, LI or I neurons"
    options_help = "dt=1e-4 (the graph's Euler step, seconds), steps=16 (time steps per sample)"

    def matches(self, spec: str) -> bool:
        return Path(spec).suffix == ".nir"

    def load(self, spec: str, request: UserRequest):
        from edgesmith.compress.import_nir import DEFAULT_DT, DEFAULT_STEPS, ImportNirConfig
        from edgesmith.compress.nir_graph import read_graph, simulate_float, to_chain
        from edgesmith.models.user import UserModel
        from edgesmith.models.user_data import TensorSpec, load_tensors

        graph = read_graph(spec)
        written = (graph.metadata or {}).get("edgesmith", {})  # a graph edgesmith's export-nir wrote says its dt, steps
        cfg = ImportNirConfig(dt=float(request.take("dt", written.get("dt", DEFAULT_DT))),
                              steps=int(request.take("steps", written.get("steps", DEFAULT_STEPS))))
        chain = to_chain(graph, spec)  # refuses unsupported nodes by name before any data is read
        specs = [TensorSpec("input", "float32", tuple(chain.input_shape))]
        cal = load_tensors(request.calibration_data, specs, "calibration data") if request.calibration_data else None
        ev = load_tensors(request.eval_data, specs, "evaluation data", request.labels) if request.eval_data else None
        if cal is None and ev is None:  # no data files: --input-shape's synthetic inputs, if given, score fidelity
            ev = synthetic_evaluation(specs, request)
        request.check_all_used(self.name)
        notes = (f"NIR graph: {chain.n_inputs} inputs -> " + " -> ".join(f"{lyr.neuron} {lyr.n_out}" for lyr in chain.layers)
                 + f"; float reference: forward Euler at dt {cfg.dt:g} s, {cfg.steps} steps per sample, readout "
                 f"{'spike counts' if chain.readout == 'spikes' else 'membrane voltage'}",)
        model = UserModel(label=Path(spec).name, kind="tensor", native_format="nir", path=Path(spec), inputs=specs,
                          calibration=cal, evaluation=ev, metric=request.metric,
                          reference=lambda x: simulate_float(chain, x, cfg.dt, cfg.steps)[0], notes=notes,
                          seed=request.seed)
        model.artifact_meta = {"nir": {"dt": cfg.dt, "steps": cfg.steps}}
        return model
