"""``tensor``: classifiers and regressors, one or more named inputs of any dtype, batch first."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from edgesmith.models.kinds.base import Kind, KindOptions, option, register_kind
from edgesmith.common.checks import is_int

CALIBRATIONS = ("minmax", "percentile")
# int8's default operator types: the layers that hold weights (embedding Gathers included). onnxruntime's full set also
# quantizes residual Adds, Concats and Softmax, whose int8 ranges cost vision and speech transformers 20 dB of output
# SQNR (DeiT 5.5 dB, Whisper's encoder 38.9 dB; 27.8 and 60.1 dB with this set). On 30 public architectures this set
# scores higher on 24 (median +1.9 dB), the same on 2 and lower on 4 (three small CNNs 1.0-3.8 dB, Wav2Vec2 0.2 dB),
# with a smaller file on 28 (docs/results/shapes-int8/)
INT8_WEIGHT_OP_TYPES = ("MatMul", "Gemm", "Conv", "ConvTranspose", "Gather")


@dataclass(frozen=True)
class TensorOptions(KindOptions):
    calibration: str = option("minmax", "int8 activation calibration: minmax or percentile")
    percentile: float = option(99.99, "percentile of |activation| kept by percentile calibration")
    int4_block_size: int = option(32, "weights per scale of the int4 MatMulNBits variant (16..256, power of 2)")
    int4_gemm: bool = option(True, "int4 variant: quantize Gemm layers too (rewritten as MatMul); false keeps them fp32")
    exclude: tuple[str, ...] = option((), "node names of the exported ONNX graph (as the report's per-layer table names "
                                           "them) that the int8, int4 and pruned variants keep in fp32")
    int8_op_types: tuple[str, ...] = option(INT8_WEIGHT_OP_TYPES, "operator types the int8 variants quantize (default: "
                                            "the weight layers); empty: every type onnxruntime's quantizer knows; auto: "
                                            "both, keeping the model whose outputs are closer to fp32's")
    prune_sparsity: float = option(0.0, "add a magnitude-pruned + int8 variant at this sparsity (0 = none)")
    qat_epochs: int = option(0, "add brevitas QAT variants (qat-w8a8, qat-w4a8) fine-tuned this many epochs (0 = none)")
    qat_keep_8bit: int = option(0, "qat-w4a8: this many layers, the most output-sensitive at 4 bits, keep 8-bit weights")

    def validate(self) -> None:
        if self.calibration not in CALIBRATIONS:
            self._fail("calibration", f"is {self.calibration!r}", f"use one of {', '.join(CALIBRATIONS)}.")
        if isinstance(self.percentile, bool) or not isinstance(self.percentile, (int, float)) \
                or not 90.0 <= float(self.percentile) <= 100.0:
            self._fail("percentile", f"is {self.percentile!r}", "use a number from 90 to 100, e.g. 99.99.")
        b = self.int4_block_size
        if not is_int(b, 16) or b > 256 or b & (b - 1):
            self._fail("int4_block_size", f"is {b!r}", "use a power of two from 16 to 256.")
        if not isinstance(self.int4_gemm, bool):
            self._fail("int4_gemm", f"is {self.int4_gemm!r}", "use true or false.")
        if isinstance(self.exclude, str) or not all(isinstance(n, str) and n for n in self.exclude):
            self._fail("exclude", f"is {self.exclude!r}",
                       "give a list of node names, e.g. '[\"/classifier/Gemm\"]' (the report's per-layer table names them).")
        if isinstance(self.int8_op_types, str) or not all(isinstance(t, str) and t for t in self.int8_op_types):
            self._fail("int8_op_types", f"is {self.int8_op_types!r}", "give a list of operator types, e.g. "
                       "'[\"MatMul\",\"Gemm\",\"Conv\"]'; the int8 pass names the ones onnxruntime knows.")
        if "auto" in self.int8_op_types and len(self.int8_op_types) > 1:
            self._fail("int8_op_types", f"is {list(self.int8_op_types)!r}",
                       "use auto alone (it chooses between the weight layers and every type), or list operator types.")
        q = self.qat_epochs
        if not is_int(q, 0):
            self._fail("qat_epochs", f"is {q!r}", "use a whole number of epochs, 0 for no QAT variants.")
        k = self.qat_keep_8bit
        if not is_int(k, 0):
            self._fail("qat_keep_8bit", f"is {k!r}", "use a whole number of layers, 0 to quantize every layer to 4 bits.")
        s = self.prune_sparsity
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 <= float(s) < 1.0:
            self._fail("prune_sparsity", f"is {s!r}", "use a fraction in [0, 1), e.g. 0.5.")


@register_kind
class TensorKind(Kind):
    name = "tensor"
    description = "tensors in, tensors out (classifiers, regressors); timed per batch, figure in samples/s"
    unit = "sample"
    default_batch_sizes = (1, 64)
    export_pass = "export-onnx"
    Options: ClassVar = TensorOptions
