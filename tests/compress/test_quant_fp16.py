"""The fp16 pass: float16 weights, float32 inputs and outputs, the model's outputs kept to float16 rounding."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from edgesmith.common import EdgesmithError
from edgesmith.compress import PassContext, run_passes
from edgesmith.compress.quant_fp16 import Fp16Config
from edgesmith.runtimes import get_runtime


def test_fp16_halves_the_weights_keeps_float32_io_and_the_outputs_close(digits, digits_onnx, tmp_path):
    art, (rep,) = run_passes(digits_onnx, [Fp16Config()], PassContext(workdir=tmp_path))
    model = onnx.load(str(art.path))
    assert {t.data_type for t in model.graph.initializer} == {onnx.TensorProto.FLOAT16}
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # fed as before
    assert rep.bits_per_weight == 16.0 and rep.size_after_bytes < 0.6 * rep.size_before_bytes
    x = digits.test_data()[0]
    y32 = get_runtime("onnxruntime", threads=1).load(digits_onnx).run(x).outputs
    y16 = get_runtime("onnxruntime", threads=1).load(art).run(x).outputs
    assert y16.dtype == np.float32 and np.abs(y16 - y32).max() < 0.05 * np.abs(y32).max()
    assert (y16.argmax(1) == y32.argmax(1)).mean() > 0.99


def test_fp16_keeps_the_named_operators_in_float32(digits_onnx, tmp_path):
    art, (rep,) = run_passes(digits_onnx, [Fp16Config(keep_fp32=("MatMul",))], PassContext(workdir=tmp_path))
    assert any("kept in float32: MatMul" in n for n in rep.notes)
    assert 16.0 < rep.bits_per_weight <= 32.0  # the MatMul weights stay float32, the biases are float16


def test_a_bad_operator_list_is_a_user_error():
    with pytest.raises(EdgesmithError, match="keep_fp32"):
        Fp16Config(keep_fp32=("",))
