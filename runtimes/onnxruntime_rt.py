"""onnxruntime, CPU execution provider: runs fp32, int8 QDQ and MatMulNBits (int4) ONNX models.

Takes one array (fed to the model's only input) or a dict of named arrays; each is checked against
the input the graph declares (name, element type, rank, fixed dimensions) before the call, so a
mismatch names the input. Integer data given to a float input is converted; other type changes are
refused. Returns every output by name (the first is the primary one).
"""
from __future__ import annotations

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import Artifact
from edgesmith.runtimes.base import Runtime, register_runtime

# onnxruntime's type strings -> numpy dtypes
ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
             "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
             "tensor(bool)": np.bool_}


def cast_for_input(name: str, x: np.ndarray, dtype, shape) -> np.ndarray:
    """``x`` as the declared ``dtype`` of input ``name`` (ints may become floats), after a rank/shape check."""
    dtype = np.dtype(dtype)
    if x.dtype != dtype:
        ok = (np.issubdtype(dtype, np.floating) and (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating))) \
            or (np.issubdtype(dtype, np.integer) and np.issubdtype(x.dtype, np.integer))
        if not ok:
            raise EdgesmithError(f"input {name!r} is {x.dtype} but the model takes {dtype}.",
                                 f"give {name!r} as {dtype} data.")
        if np.issubdtype(dtype, np.integer) and np.issubdtype(x.dtype, np.integer):
            info = np.iinfo(dtype)
            if x.size and (x.min() < info.min or x.max() > info.max):
                raise EdgesmithError(f"input {name!r} holds values outside the range of {dtype}.",
                                     f"give {name!r} values in [{info.min}, {info.max}].")
        x = x.astype(dtype)
    if shape is not None:
        if x.ndim != len(shape):
            raise EdgesmithError(f"input {name!r} has shape {tuple(x.shape)} but the model takes rank {len(shape)} "
                                 f"({', '.join(str(d) if isinstance(d, int) else '?' for d in shape)}).",
                                 f"reshape {name!r} to the model's input shape.")
        bad = [i for i, d in enumerate(shape) if isinstance(d, int) and d > 0 and x.shape[i] != d]
        if bad:
            raise EdgesmithError(f"input {name!r} has shape {tuple(x.shape)} but the model takes "
                                 f"({', '.join(str(d) if isinstance(d, int) else '?' for d in shape)}).",
                                 f"reshape {name!r} to the model's input shape (dimension {bad[0]} differs).")
    return np.ascontiguousarray(x)


@register_runtime
class OnnxRuntime(Runtime):
    name = "onnxruntime"
    contract_fixture = "mlp-onnx"
    formats = ("onnx",)
    description = "onnxruntime CPUExecutionProvider, graph optimizations on"
    multi_input = True

    def _load(self, artifact: Artifact) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        if self.threads:
            so.intra_op_num_threads = int(self.threads)
            so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        try:
            self.session_ = ort.InferenceSession(str(artifact.path), so, providers=["CPUExecutionProvider"])
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise EdgesmithError(
                f"onnxruntime could not load {artifact.path}: {msg[:300]}",
                "the file is corrupt or uses an unsupported operator; re-export it.",
            ) from None
        self.inputs_ = {i.name: (ORT_TYPES.get(i.type, np.float32), i.shape) for i in self.session_.get_inputs()}
        self.output_names_ = [o.name for o in self.session_.get_outputs()]
        self.input_name_ = next(iter(self.inputs_))

    def _check_shape(self, x) -> None:
        if isinstance(x, dict):
            missing = [n for n in self.inputs_ if n not in x]
            extra = [n for n in x if n not in self.inputs_]
            if missing or extra:
                raise EdgesmithError(
                    f"the model takes inputs {', '.join(self.inputs_)} but got {', '.join(x)}"
                    + (f" (missing {', '.join(missing)})" if missing else "")
                    + (f" (unknown {', '.join(extra)})" if extra else "") + ".",
                    "name the arrays after the model's inputs (an .npz with one array per input name).")
        else:
            if len(self.inputs_) != 1:
                raise EdgesmithError(f"the model takes {len(self.inputs_)} inputs ({', '.join(self.inputs_)}) but got "
                                     "one array.", "give one array per input name (an .npz or a dict).")
            super()._check_shape(x)

    def _feed(self, x) -> dict:
        items = x.items() if isinstance(x, dict) else [(self.input_name_, x)]
        return {n: cast_for_input(n, a, *self.inputs_[n]) for n, a in items}

    def _run(self, x) -> tuple[dict, dict]:
        outs = self.session_.run(None, self._feed(x))
        return dict(zip(self.output_names_, outs)), {"threads": self.threads or "default",
                                                     "provider": "CPUExecutionProvider"}
