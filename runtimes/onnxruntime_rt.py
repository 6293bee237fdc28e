"""onnxruntime, CPU execution provider: runs fp32, int8 QDQ and MatMulNBits (int4) ONNX models."""
from __future__ import annotations

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError
from edgesmith.runtimes.base import Runtime, register_runtime


@register_runtime
class OnnxRuntime(Runtime):
    name = "onnxruntime"
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
        self.input_name_ = self.session_.get_inputs()[0].name

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        out = self.session_.run(None, {self.input_name_: x})[0]
        return out, {"threads": self.threads or "default", "provider": "CPUExecutionProvider"}
