"""A registered producer with the user's own data: its model, the user's calibration and evaluation data
and metric (``edgesmith deploy digits-mlp --eval-data mine.npz --metric accuracy``; a token-lm producer
takes text)."""
from __future__ import annotations

import numpy as np

from edgesmith.bench.sources.base import UserRequest
from edgesmith.common import EdgesmithError


CALIBRATION_SAMPLES = 512  # the most any kind asks for; a deploy takes the first n_calibration of them


def with_user_data(producer, request: UserRequest):
    import torch

    from edgesmith.models.user import UserModel
    from edgesmith.models.user_data import TensorData, TensorSpec, load_tensors

    producer.build()
    own = getattr(producer, "use_user_data", None)
    notes = own(request.calibration_data, request.eval_data) if own else None
    if notes is not None:  # the producer reads this data itself (a stream model's folder of WAV files)
        if request.labels or request.metric:
            raise EdgesmithError(f"{producer.name} scores its own data with {producer.metric.name}; --labels and "
                                 "--metric do not apply to it.", "drop --labels / --metric.")
        producer.user_notes_ = notes
        return producer
    if producer.kind == "token-lm":
        from edgesmith.bench.sources.rwkv_checkpoint import rwkv_user_model

        return rwkv_user_model(producer.module, producer.name, request, [f"{producer.name} with the user's text"])
    dtype = np.asarray(producer.example_inputs(1)).dtype.name
    specs = [TensorSpec("input", dtype, tuple(producer.input_shape))]
    if request.calibration_data:
        cal = load_tensors(request.calibration_data, specs, "calibration data")
    else:  # the user's evaluation data, but the producer's own calibration set (what its passes were tuned on)
        own = producer.calibration_data(CALIBRATION_SAMPLES)
        cal = None if own is None else TensorData({"input": np.asarray(own)})
    ev = load_tensors(request.eval_data, specs, "evaluation data", request.labels) if request.eval_data else None
    module = getattr(producer, "module", None)
    path = getattr(producer, "path", None)
    file_reference = None
    if module is None:  # a model that is a file (a netx network): its format's reference runtime reads it
        from edgesmith.compress import Artifact
        from edgesmith.compress.formats import reference_runtime
        from edgesmith.runtimes import get_runtime

        rt = get_runtime(reference_runtime(producer.native_format), threads=1)
        rt.load(Artifact(producer.native_format, path=path, meta={"input_shape": list(producer.input_shape)}))
        file_reference = rt

    def reference(x):
        if file_reference is not None:
            return file_reference.run(np.asarray(x)).outputs
        if producer.native_format != "torch":
            return module.predict(x)
        with torch.inference_mode():
            out = module(torch.as_tensor(x))
        return (out[0] if isinstance(out, (tuple, list)) else out).numpy()

    return UserModel(label=producer.name, kind=producer.kind, native_format=producer.native_format, module=module,
                     path=path, inputs=specs, calibration=cal if cal is not None else None, evaluation=ev, metric=request.metric,
                     reference=reference, notes=(f"{producer.name} with the user's data", *producer.report_notes()), seed=request.seed,
                     frame_seconds=getattr(producer, "frame_seconds", None))
