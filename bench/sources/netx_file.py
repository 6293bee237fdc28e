"""A netx HDF5 network (lava-dl's exchange format: ``slayer`` networks' ``export_hdf5``, or edgesmith's
``export-netx``), deployed as it is to loihi2: loaded by lava-dl's netx in Lava, checked against the
bit-exact reference, with activity counts and estimates. Accuracy needs ``--eval-data`` and ``--labels``;
without labels the run is scored by fidelity to the reference (the float semantics of a netx file are
its own integers, so the reference is exact by construction).
"""
from __future__ import annotations

from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, register_source, synthetic_evaluation
from edgesmith.compress.formats import NETX_SUFFIXES as SUFFIXES  # one list: what deploy reads, export writes


@register_source
class NetxFileSource(ModelSource):
    name = "netx"
    description = "a netx HDF5 Sigma-Delta network (lava-dl export_hdf5 or edgesmith export-netx; .net/.h5/.hdf5)"

    def matches(self, spec: str) -> bool:
        # no other source reads these suffixes: a file that is not a netx network is told why by NetxNet.load
        return Path(spec).suffix in SUFFIXES and Path(spec).is_file()

    def load(self, spec: str, request: UserRequest):
        from edgesmith.models.user import UserModel
        from edgesmith.models.user_data import TensorSpec, load_tensors
        from edgesmith.compress.netx_format import NetxNet, run_float

        net = NetxNet.load(spec)
        specs = [TensorSpec("input", "float32", (net.n_inputs,))]
        cal = load_tensors(request.calibration_data, specs, "calibration data") if request.calibration_data else None
        ev = load_tensors(request.eval_data, specs, "evaluation data", request.labels) if request.eval_data else None
        if cal is None and ev is None:  # no data files: --input-shape's synthetic inputs, if given, score fidelity
            ev = synthetic_evaluation(specs, request)
        units = ("the file's edgesmith group" if net.units == "edgesmith" else
                 f"lava-dl's units (x_int = {net.input_weight:g} x + {net.input_bias:g} by the input transform, "
                 f"outputs x {net.output_scale:g})")
        notes = [f"{net.n_layers} dense layer(s) {[lyr.n_out for lyr in net.layers]}, "
                 f"{net.steps_per_sample} steps per sample; float inputs and outputs are scaled by {units}",
                 *net.notes]
        return UserModel(label=Path(spec).name, kind="tensor", native_format="netx", path=Path(spec), inputs=specs,
                         calibration=cal, evaluation=ev, metric=request.metric,
                         reference=lambda x: run_float(net, x)[0], notes=tuple(notes), seed=request.seed)
