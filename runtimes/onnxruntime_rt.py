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
from edgesmith.runtimes.base import NamedInputRuntime, register_runtime

# onnxruntime's type strings -> numpy dtypes
ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
             "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
             "tensor(bool)": np.bool_}


@register_runtime
class OnnxRuntime(NamedInputRuntime):
    name = "onnxruntime"
    contract_fixture = "mlp-onnx"
    formats = ("onnx",)
    description = "onnxruntime CPUExecutionProvider, graph optimizations on"

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

    def _run(self, x) -> tuple[dict, dict]:
        outs = self.session_.run(None, self._feed(x))
        return dict(zip(self.output_names_, outs)), {"threads": self.threads or "default",
                                                     "provider": "CPUExecutionProvider"}
