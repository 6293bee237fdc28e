"""qat-w8-loihi: brevitas QAT on the loihi2 conversion's own grid; export-netx then stores the learned integers."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, config_from_dict, run_passes
from edgesmith.compress.export_netx import ExportNetxConfig
from edgesmith.compress.netx_format import read_netx
from edgesmith.compress.qat_loihi import QatLoihiConfig
from edgesmith.hardware import PlanOptions, get_target
from edgesmith.models import get_producer
from edgesmith.runtimes import get_runtime


@pytest.fixture(scope="module")
def digits():
    return get_producer("digits-mlp").build()


def _convert(producer, tmp_path, passes):
    x, y = producer.training_data()
    ctx = PassContext(workdir=tmp_path, calibration=x[:128], example_input=x[:1], train_data=(x, y), progress=False)
    return run_passes(Artifact("torch", module=producer.module, meta={"input_shape": [64]}), passes, ctx)


def test_the_netx_file_holds_exactly_the_integers_qat_learned(digits, tmp_path):
    art, reports = _convert(digits, tmp_path, [QatLoihiConfig(epochs=1), ExportNetxConfig()])
    qat, export = reports
    assert export.extra["learned_integers_kept"] == [True, True, True]
    assert any("3 of 3 layer(s) store the learned" in n for n in export.notes)
    assert any("the one qat-w8-loihi trained on" in n for n in export.notes)
    assert export.extra["input_scale"] == qat.extra["input_scale"]
    assert all(np.abs(layer.weight).max() <= 127 for layer in read_netx(art.path).layers)


def test_qat_weights_are_on_the_grid_and_the_network_scores_like_the_ptq_conversion(digits, tmp_path):
    x, y = digits.training_data()
    ctx = PassContext(workdir=tmp_path / "q", calibration=x[:128], example_input=x[:1], train_data=(x, y), progress=False)
    torch_art, reports = run_passes(Artifact("torch", module=digits.module, meta={"input_shape": [64]}),
                                    [QatLoihiConfig(epochs=1)], ctx)
    for layer, lin in zip(reports[0].extra["layers"],
                          [m for m in torch_art.module.modules() if isinstance(m, torch.nn.Linear)]):
        ints = lin.weight.detach().double().numpy() / layer["scale"]
        assert np.allclose(ints, np.rint(ints), atol=1e-3) and np.abs(np.rint(ints)).max() <= 127
    qat_art, _ = run_passes(torch_art, [ExportNetxConfig()], ctx)
    ptq_art, _ = _convert(digits, tmp_path / "p", [ExportNetxConfig()])
    linears = [m for m in torch_art.module.modules() if isinstance(m, torch.nn.Linear)]
    for stored, lin, layer in zip(read_netx(qat_art.path).layers, linears, reports[0].extra["layers"]):
        learned = np.rint(lin.weight.detach().double().numpy() / layer["scale"]).astype(np.int64)
        np.testing.assert_array_equal(stored.weight, learned)  # learned, not rounded again
    acc = {}
    for name, art in (("qat", qat_art), ("ptq", ptq_art)):
        rt = get_runtime("netx-ref").load(art)
        acc[name] = digits.evaluate(lambda f: rt.run(np.asarray(f, np.float32)).outputs).value
    assert acc["qat"] >= acc["ptq"] - 0.01


def test_config_validates_and_round_trips():
    cfg = QatLoihiConfig(epochs=2, lr=1e-3)
    assert config_from_dict(json.loads(cfg.to_json())) == cfg
    with pytest.raises(EdgesmithError, match="epochs"):
        QatLoihiConfig(epochs=-1)


def test_a_model_the_conversion_cannot_map_is_refused_before_training(tmp_path):
    conv = torch.nn.Sequential(torch.nn.Conv1d(1, 2, 3))
    x = np.zeros((8, 1, 8), np.float32)
    ctx = PassContext(workdir=tmp_path, calibration=x, example_input=x[:1], train_data=x, progress=False)
    with pytest.raises(EdgesmithError, match="Sigma-Delta"):
        run_passes(Artifact("torch", module=conv), [QatLoihiConfig(epochs=1)], ctx)


def test_loihi2_offers_the_qat_variant_only_when_asked(digits):
    target = get_target("loihi2")
    assert [v.name for v in target.plan(digits, PlanOptions()).variants] == ["sigma-delta"]
    plan = target.plan(digits, PlanOptions(options={"qat_epochs": 4}))
    qat = next(v for v in plan.variants if v.name == "sigma-delta-qat")
    assert [p.kind for p in qat.passes] == ["qat-w8-loihi", "export-netx"] and qat.passes[0].epochs == 4
    with pytest.raises(EdgesmithError, match="qat_epochs"):
        target.plan(digits, PlanOptions(variants=["sigma-delta-qat"]))
