"""OpenVINO, CPU plugin: runs the same ONNX files as onnxruntime (fp32, int8 QDQ, MatMulNBits int4).

OpenVINO reads the ONNX file itself (no conversion step, nothing written) and turns Q/DQ pairs into its own
low-precision kernels. Two settings keep its rows comparable with onnxruntime's: floating-point layers
compute in f32 (``INFERENCE_PRECISION_HINT``; the plugin's default on CPUs with bf16 or fp16 units is to
compute in those, which would make an "fp32" row a bf16 one), and one stream with the latency hint, so a
batch-1 call is one inference on ``threads`` threads. A deploy that asks for this runtime builds its int8 variants
once more in the form OpenVINO fuses (``pass_options``: quantizers on layers' inputs only, as NNCF places them) and
names them ``VARIANT-openvino``.

The ``openvino`` package is not a dependency of edgesmith: it is in the ``peer`` extra
(``pip install 'edgesmith[peer]'``), and this runtime says so when it is missing.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import Artifact
from edgesmith.runtimes.base import NamedInputRuntime, register_runtime

# OpenVINO's element type names -> numpy dtypes
OV_TYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64, "i32": np.int32,
            "i16": np.int16, "i8": np.int8, "u8": np.uint8, "u16": np.uint16, "boolean": np.bool_}


def _reason(e: Exception) -> str:
    """The informative part of an OpenVINO exception: its message lines without the "Exception from FILE:LINE:"
    trail of the C++ frames it passed through."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith("Exception from ")]
    return " ".join(lines) or type(e).__name__


@register_runtime
class OpenVinoRuntime(NamedInputRuntime):
    name = "openvino"
    contract_fixture = "mlp-onnx"
    formats = ("onnx",)
    description = "OpenVINO CPU plugin, f32 inference precision, latency hint, one stream"
    extra = "peer"
    # quantizers on layers' inputs only: OpenVINO fuses those; the output requantization onnxruntime's integer
    # kernels need stays a dequantize/quantize round trip here (PP-OCR det int8 1.15x fp32 with it, 0.65x without)
    pass_options = {"int8-qdq": {"output_quantizers": False}}

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if importlib.util.find_spec("openvino") is None:
            return False, ("the openvino package is not installed. Fix: pip install 'edgesmith[peer]' "
                           "(or pip install openvino)")
        return True, ""

    def _load(self, artifact: Artifact) -> None:
        import openvino as ov

        config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = int(self.threads)
        try:
            core = ov.Core()
            self.compiled_ = core.compile_model(core.read_model(str(artifact.path)), "CPU", config)
        except Exception as e:
            msg = _reason(e)
            raise EdgesmithError(f"OpenVINO could not load {artifact.path}: {msg[:300]}",
                                 "the file uses an operator OpenVINO's ONNX reader lacks; run it in onnxruntime.") from None
        self.request_ = self.compiled_.create_infer_request()
        self.inputs_ = {}
        for port in self.compiled_.inputs:
            shape = port.get_partial_shape()
            dims = [d.get_length() if d.is_static else None for d in shape] if shape.rank.is_static else None
            self.inputs_[port.get_any_name()] = (OV_TYPES.get(port.get_element_type().get_type_name(), np.float32), dims)
        self.output_names_ = [port.get_any_name() for port in self.compiled_.outputs]

    def _run(self, x) -> tuple[dict, dict]:
        result = self.request_.infer(self._feed(x), share_inputs=False)
        outs = {name: np.array(result[i]) for i, name in enumerate(self.output_names_)}
        return outs, {"threads": self.threads or "default", "device": "CPU", "inference_precision": "f32"}
