"""The OpenVINO backend: a benchmark peer's runtime, so its package comes from the ``peer`` extra.

Without the package (as in the tests' own environment) it must be refused in one line that names the extra;
with it, it must run edgesmith's fp32 and int8 files as onnxruntime does.
"""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith import testing
from edgesmith.common import EdgesmithError
from edgesmith.runtimes import get_runtime
from edgesmith.runtimes.base import RUNTIMES


@pytest.fixture
def without_openvino(monkeypatch):
    import edgesmith.runtimes.openvino_rt as ov_rt

    monkeypatch.setattr(ov_rt.importlib.util, "find_spec", lambda name, *a: None)


@pytest.fixture
def fixtures(tmp_path):
    return testing.Fixtures(tmp_path / "fixtures")


def test_without_the_package_openvino_is_refused_naming_the_peer_extra(without_openvino):
    with pytest.raises(EdgesmithError) as e:
        get_runtime("openvino")
    assert "not installed" in e.value.problem and "edgesmith[peer]" in e.value.fix


def test_without_the_package_the_contract_is_the_refusal(without_openvino, fixtures, tmp_path):
    testing.check_runtime("openvino", tmp_path, fixtures)


def test_a_missing_extra_that_is_not_named_breaks_the_contract(monkeypatch, fixtures, tmp_path):
    # a peer's backend that fails without saying which extra brings it leaves the user guessing
    monkeypatch.setattr(RUNTIMES.get("openvino"), "available", classmethod(lambda cls: (False, "no package. Fix: ask")))
    with pytest.raises(testing.ContractError, match="must name the extra"):
        testing.check_runtime("openvino", tmp_path, fixtures)


def test_openvino_gives_onnxruntime_s_answers_on_fp32_and_int8_files(digits, digits_onnx, tmp_path):
    pytest.importorskip("openvino", reason="OpenVINO is a benchmark peer (the peer extra), not a test dependency")
    from edgesmith.compress import PassContext, run_passes
    from edgesmith.compress.quant_int8 import Int8QdqConfig

    x, _ = digits.test_data()
    ctx = PassContext(workdir=tmp_path, calibration=digits.calibration_data(), example_input=digits.example_inputs(1))
    int8, _ = run_passes(digits_onnx, [Int8QdqConfig()], ctx)
    for art in (digits_onnx, int8):
        ort = get_runtime("onnxruntime", threads=1).load(art).run(x).outputs
        res = get_runtime("openvino", threads=1).load(art).run({"input": x})
        # int8: both run integer kernels on the same scales, so only rounding at the dequantized output differs
        agree = np.mean(res.outputs.argmax(1) == ort.argmax(1))
        assert agree >= 0.99, f"{art.meta.get('precision', 'fp32')}: top-1 agrees on {agree:.1%}"
        assert res.stats["inference_precision"] == "f32"


def test_a_load_failure_names_openvino_s_reason_not_its_cpp_frames():
    from edgesmith.runtimes.openvino_rt import _reason

    e = RuntimeError("Exception from src/inference/src/cpp/core.cpp:132:\nException from src/core/src/pass/x.cpp:298:\n"
                     "[AddTransformation] END: node: Add@1 CALLBACK HAS THROWN: Check failed\nindex '0' out of range\n\n")
    assert _reason(e) == "[AddTransformation] END: node: Add@1 CALLBACK HAS THROWN: Check failed index '0' out of range"
