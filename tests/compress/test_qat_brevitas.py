"""brevitas QAT passes (qat-w8a8, qat-w4a8): swapped layers, faithful QCDQ export, fine-tuning, plans, errors."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from edgesmith.bench.pipeline.deploy import source_artifact
from edgesmith.common import EdgesmithError
from edgesmith.compress import PassContext, config_from_dict, run_passes
from edgesmith.compress.qat_brevitas import QatW4A8Config, layer_sensitivity, quantized_copy
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


def test_host_plan_exports_the_integer_form_and_jetson_the_portable_qcdq():
    p = get_producer("digits-mlp")
    opts = PlanOptions(options={"qat_epochs": 1, "qat_keep_8bit": 1}, variants=["qat-w8a8", "qat-w4a8"])
    host, jetson = (get_target(t).plan(p, opts) for t in ("host-cpu", "jetson-orin-nano"))
    assert {v.passes[-1].form for v in host.variants} == {"ort-integer"}
    assert {v.passes[-1].form for v in jetson.variants} == {"qcdq"}  # TensorRT reads QCDQ, not onnxruntime contrib ops
    assert [v.passes[-1].keep_8bit for v in host.variants] == [0, 1]
    with pytest.raises(EdgesmithError, match="qat_keep_8bit"):
        get_target("host-cpu").plan(p, PlanOptions(options={"qat_epochs": 1, "qat_keep_8bit": -1}))


def test_sensitivity_ranks_every_layer_and_keep_8bit_raises_the_worst_one(tmp_path):
    p = get_producer("digits-mlp").build()
    x, y = p.training_data()
    table = layer_sensitivity(p.module, np.asarray(x, np.float32), QatW4A8Config())
    assert [r["layer"] for r in table] and sorted(r["layer"] for r in table) == ["0", "2", "4"]
    errors = [r["relative_error"] for r in table]
    assert errors == sorted(errors, reverse=True) and all(r["delta_db"] > 0 for r in table)
    ctx = PassContext(workdir=tmp_path, example_input=x[:1], calibration=x[:64], train_data=(x, y), progress=False)
    _, reports = run_passes(source_artifact(p), [QatW4A8Config(epochs=0, keep_8bit=1)], ctx)
    rep = reports[-1]
    bits = {layer["name"]: layer["weight_bits"] for layer in rep.extra["layers"]}
    assert bits[table[0]["layer"]] == 8 and sorted(bits.values()) == [4, 4, 8]
    assert 4.0 < rep.bits_per_weight < 8.0 and rep.extra["sensitivity"][0]["layer"] == table[0]["layer"]
    assert any("kept at 8 bits" in note for note in rep.notes)
    _, reports = run_passes(source_artifact(p), [QatW4A8Config(epochs=0, keep_8bit=1, layer_bits={table[0]["layer"]: 3})],
                            ctx)
    assert {layer["name"]: layer["weight_bits"] for layer in reports[-1].extra["layers"]}[table[0]["layer"]] == 3


def test_keep_8bit_is_validated_and_round_trips():
    with pytest.raises(EdgesmithError, match="keep_8bit"):
        QatW4A8Config(keep_8bit=-2)
    cfg = QatW4A8Config(keep_8bit=1, layer_bits={"4": 3})
    assert config_from_dict(json.loads(cfg.to_json())) == cfg


def test_the_report_gives_each_layer_its_weight_error(tmp_path):
    p = get_producer("digits-mlp").build()
    x, y = p.training_data()
    ctx = PassContext(workdir=tmp_path, example_input=x[:1], calibration=x[:64], train_data=(x, y), progress=False)
    _, reports = run_passes(source_artifact(p), [QatW4A8Config(epochs=0, keep_8bit=1)], ctx)
    rows = {r.name: r for r in reports[-1].layers}
    assert sorted(rows) == ["0", "2", "4"] and all(r.action == "quantized" for r in rows.values())
    for r in rows.values():
        # no fine-tuning: the latent weights are the float ones, so both errors are the rounding alone
        assert r.error["weight_sqnr_db"] == r.error["rounding_sqnr_db"] > 10
        assert "output_sqnr_db_alone" in r.error
    assert rows["4"].bits_per_weight == 8 and rows["4"].error["rounding_sqnr_db"] > rows["0"].error["rounding_sqnr_db"]
