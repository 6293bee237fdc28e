"""brevitas QAT passes (qat-w8a8, qat-w4a8): swapped layers, faithful QCDQ export, fine-tuning, plans, errors."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from edgesmith.bench.deploy import source_artifact
from edgesmith.common import EdgesmithError
from edgesmith.compress import PassContext, config_from_dict, run_passes
from edgesmith.compress.qat_brevitas import QatW4A8Config, quantized_copy
from edgesmith.hardware import PlanOptions, get_target
from edgesmith.models import get_producer
from edgesmith.runtimes import get_runtime


@pytest.fixture(scope="module")
def cnn():
    return get_producer("noise-cnn", tiny=True).build()


def _run(producer, kind, tmp_path, **options):
    ctx = PassContext(workdir=tmp_path, train_data=producer.training_data(), example_input=producer.example_inputs(1),
                      calibration=producer.calibration_data(64), progress=False)
    return run_passes(source_artifact(producer), [config_from_dict({"kind": kind, **options})], ctx)


def test_configs_validate_and_round_trip_through_json():
    cfg = QatW4A8Config(epochs=2, layer_bits={"filters": 3})
    assert config_from_dict(json.loads(cfg.to_json())) == cfg and cfg.weight_bits == 4
    for bad in ({"weight_bits": 1}, {"act_bits": 9}, {"epochs": -1}, {"layer_bits": {"x": 12}}):
        with pytest.raises(EdgesmithError):
            config_from_dict({"kind": "qat-w8a8", **bad})


def test_w4a8_export_holds_4bit_integer_weights_and_runs_in_onnxruntime_as_a_classifier(cnn, tmp_path):
    art, reports = _run(cnn, "qat-w4a8", tmp_path, epochs=1)
    model = onnx.load(str(art.path))
    ints = [numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"]
    weights = [a for a in ints if a.dtype == np.int8 and a.ndim == 2]
    assert weights and all(a.min() >= -8 and a.max() <= 7 for a in weights)
    assert reports[-1].bits_per_weight == 4.0 and reports[-1].extra["fine_tune_s"] > 0
    x = cnn.calibration_data(32).astype(np.float32)
    out = get_runtime("onnxruntime").load(art).run(x).outputs
    assert np.all(np.isfinite(out)) and out.shape == (32, 2)
    ev = cnn.evaluate(lambda f: get_runtime("onnxruntime").load(art).run(np.asarray(f, np.float32)).outputs)
    assert ev.value > 0.8  # the fp32 tiny model scores about 0.9: 4-bit QAT keeps it a classifier


def test_the_swapped_model_is_the_float_model_before_quantization_noise(cnn):
    q, layers = quantized_copy(cnn.module, QatW4A8Config(weight_bits=8))
    assert [layer["name"] for layer in layers] == ["filters"]
    assert torch.equal(q.filters.weight, cnn.module.filters.weight)  # weights copied, not re-initialized


def test_without_labels_it_distils_on_the_calibration_inputs(tmp_path):
    p = get_producer("digits-mlp").build()
    ctx = PassContext(workdir=tmp_path, example_input=p.example_inputs(1), calibration=p.calibration_data(128),
                      progress=False)
    art, reports = run_passes(source_artifact(p), [config_from_dict({"kind": "qat-w8a8", "epochs": 1})], ctx)
    assert "MSE to the float model" in reports[-1].extra["objective"]
    rt = get_runtime("onnxruntime").load(art)
    assert p.evaluate(lambda f: rt.run(np.asarray(f, np.float32)).outputs).value > 0.9


def test_bad_requests_are_readable_errors(cnn, tmp_path):
    with pytest.raises(EdgesmithError, match="layers the model does not have"):
        quantized_copy(cnn.module, QatW4A8Config(layer_bits={"nope": 4}))
    with pytest.raises(EdgesmithError, match="no Linear or Conv"):
        quantized_copy(torch.nn.Sequential(torch.nn.ReLU()), QatW4A8Config())


def test_host_and_jetson_plans_offer_qat_only_when_asked_and_training_data_exists():
    p = get_producer("digits-mlp")
    for target in ("host-cpu", "jetson-orin-nano"):
        plan = get_target(target).plan(p, PlanOptions())
        assert not {"qat-w8a8", "qat-w4a8"} & {v.name for v in plan.variants}
        with pytest.raises(EdgesmithError, match="qat_epochs"):
            get_target(target).plan(p, PlanOptions(variants=["qat-w4a8"]))
        plan = get_target(target).plan(p, PlanOptions(options={"qat_epochs": 2}, variants=["qat-w8a8", "qat-w4a8"]))
        assert [v.passes[-1].epochs for v in plan.variants] == [2, 2]
