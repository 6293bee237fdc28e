"""The sqaoa producer: config validation, reproducible angles, evaluation through predict, a tiny deploy."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.sqaoa.producer import SqaoaConfig


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import os

    os.environ["EDGESMITH_CACHE"] = str(tmp_path_factory.mktemp("cache"))  # train here, not from a stale cache
    try:
        return get_producer("sqaoa", tiny=True).build()
    finally:
        os.environ.pop("EDGESMITH_CACHE")


def _torch_predict(module):
    return lambda x: module(torch.from_numpy(np.asarray(x, dtype=np.float32))).detach().numpy()


def test_bad_config_is_a_user_error():
    with pytest.raises(EdgesmithError):
        SqaoaConfig(n=12)
    with pytest.raises(EdgesmithError):
        SqaoaConfig(t=1.5)


def test_input_shape_comes_from_the_config_without_building():
    p = get_producer("sqaoa", n=5)
    assert p.input_shape == (10,) and not hasattr(p, "module_")


def test_module_outputs_distributions(tiny):
    x = tiny.calibration_data(8)
    out = _torch_predict(tiny.module)(x)
    assert out.shape == (len(x), 16)
    assert np.allclose(out.sum(axis=1), 1.0, atol=1e-5) and (out >= 0).all()


def test_same_seed_gives_the_same_angles(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    again = get_producer("sqaoa", tiny=True).build()
    assert torch.equal(again.module.theta, tiny.module.theta)


def test_evaluation_is_a_ratio_and_rejects_wrong_shapes(tiny):
    ev = tiny.evaluate(_torch_predict(tiny.module))
    assert 0 < ev.value <= 1 and 0 < ev.extra["nucleus_expected_ratio"] <= 1
    # a predictor that ignores the graph (uniform outcomes) decodes to worse clusterings
    uniform = tiny.evaluate(lambda x: np.full((len(x), 16), 1 / 16, dtype=np.float32))
    assert uniform.value < ev.value
    with pytest.raises(EdgesmithError):
        tiny.check_input(np.zeros((2, 5), dtype=np.float32))


def test_tiny_deploy_reports_fp32_equal_to_torch_and_a_close_int8(tmp_path, monkeypatch):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    out = deploy(DeployOptions("sqaoa", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    import json

    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 0.1
    assert any("outside the graph" in n for n in report["notes"])
