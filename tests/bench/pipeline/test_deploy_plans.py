"""A deploy's plan with the runtimes the user asked for: which variants each joins, and the copies it asks for."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgesmith.bench.pipeline.plans import deploy_plan
from edgesmith.common import EdgesmithError
from edgesmith.hardware import PlanOptions, get_target

PRODUCER = SimpleNamespace(name="stub", kind="tensor", native_format="torch")  # not built: plans must not need a trained model


def _by_name(plan):
    return {v.name: v for v in plan.variants}


def _plan(target, producer=PRODUCER, **options):
    return deploy_plan(get_target(target), producer, PlanOptions(**options))


def test_an_asked_for_runtime_joins_every_variant_whose_file_it_loads():
    v = _by_name(_plan("host-cpu", runtimes=("tvm",)))
    assert v["fp32"].runtimes == v["int8"].runtimes == v["int4"].runtimes == ["onnxruntime", "tvm"]


def test_a_runtime_with_pass_options_gets_its_own_copy_of_the_variants_that_have_that_pass():
    # OpenVINO fuses quantizers on layers' inputs: its int8 is built once more in that form, run only there
    plan = _plan("host-cpu", runtimes=("openvino",))
    v = _by_name(plan)
    assert list(v) == ["fp32", "int8", "int8-openvino", "int4"]
    assert v["fp32"].runtimes == v["int4"].runtimes == ["onnxruntime", "openvino"]
    assert v["int8"].runtimes == ["onnxruntime"] and v["int8"].passes[-1].output_quantizers is True
    assert v["int8-openvino"].runtimes == ["openvino"]
    assert v["int8-openvino"].passes[-1].output_quantizers is False
    assert v["int8-openvino"].passes[-1].op_types == v["int8"].passes[-1].op_types  # the user's options kept
    assert any("runtime openvino (asked for) runs fp32, int8-openvino, int4" in n for n in plan.notes)


def test_asking_for_runtimes_keeps_to_the_variants_asked_for():
    v = _by_name(_plan("host-cpu", variants=("fp32",), runtimes=("openvino",)))
    assert list(v) == ["fp32"] and v["fp32"].runtimes == ["onnxruntime", "openvino"]


def test_an_estimated_target_refuses_more_runtimes_since_they_would_time_this_machine():
    with pytest.raises(EdgesmithError, match="would time this machine"):
        _plan("jetson-orin-nano", runtimes=("openvino",))


def test_an_unknown_runtime_is_one_error_listing_the_runtimes():
    with pytest.raises(EdgesmithError, match="openvino"):
        _plan("host-cpu", runtimes=("openvno",))
    with pytest.raises(EdgesmithError, match="runtimes"):
        PlanOptions(runtimes=(3,))


def test_a_runtime_the_model_rules_out_is_left_out_with_its_reason():
    producer = SimpleNamespace(**vars(PRODUCER), unsupported_runtimes=lambda: {"openvino": "it reads int64 states"})
    plan = _plan("host-cpu", producer, runtimes=("openvino",))
    assert all("openvino" not in v.runtimes for v in plan.variants)
    assert "runtime openvino left out for this model: it reads int64 states" in plan.notes
