"""A registered producer with the user's own data: its model, the user's calibration and evaluation data
and metric (``edgesmith deploy digits-mlp --eval-data mine.npz --metric accuracy``; a token-lm producer
takes text)."""
from __future__ import annotations

import numpy as np

from edgesmith.bench.sources.base import UserRequest


def with_user_data(producer, request: UserRequest):
    import torch

    from edgesmith.models.user import UserModel
    from edgesmith.models.user_data import TensorSpec, load_tensors

    producer.build()
    if producer.kind == "token-lm":
        from edgesmith.bench.sources.rwkv_checkpoint import rwkv_user_model

        return rwkv_user_model(producer.module, producer.name, request, [f"{producer.name} with the user's text"])
    dtype = np.asarray(producer.example_inputs(1)).dtype.name
    specs = [TensorSpec("input", dtype, tuple(producer.input_shape))]
    cal = load_tensors(request.calibration_data, specs, "calibration data") if request.calibration_data else None
    ev = load_tensors(request.eval_data, specs, "evaluation data", request.labels) if request.eval_data else None
    module = producer.module

    def reference(x):
        if producer.native_format != "torch":
            return module.predict(x)
        with torch.inference_mode():
            out = module(torch.as_tensor(x))
        return (out[0] if isinstance(out, (tuple, list)) else out).numpy()

    return UserModel(label=producer.name, kind=producer.kind, native_format=producer.native_format, module=module,
                     inputs=specs, calibration=cal if cal is not None else None, evaluation=ev, metric=request.metric,
                     reference=reference, notes=(f"{producer.name} with the user's data",), seed=request.seed,
                     frame_seconds=getattr(producer, "frame_seconds", None))
