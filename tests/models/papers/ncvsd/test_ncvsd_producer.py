"""The ncvsd producer: shapes from the config, reproducible training, metric through predict, deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError


def _predict(module):
    def predict(x):
        with torch.no_grad():
            return module(torch.from_numpy(x)).numpy()
    return predict


@pytest.fixture(scope="module")
def tiny():
    return get_producer("ncvsd", tiny=True).build()


def test_input_shape_comes_from_the_config_without_training():
    p = get_producer("ncvsd", dim=8)
    assert p.input_shape == (17,) and not hasattr(p, "module_")


def test_training_is_reproducible_for_a_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "a"))
    a = get_producer("ncvsd", tiny=True, steps=20).build().module.state_dict()
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "b"))
    b = get_producer("ncvsd", tiny=True, steps=20).build().module.state_dict()
    c = get_producer("ncvsd", tiny=True, steps=20, seed=1).build().module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_evaluation_reports_one_two_and_four_step_mmd(tiny):
    ev = tiny.evaluate(_predict(tiny.module))
    assert ev.metric.name == "mmd_1step" and not ev.metric.higher_is_better
    assert ev.value == ev.extra["mmd_1step"] and np.isfinite(ev.value) and ev.value > 0
    assert {"mmd_2step", "mmd_4step", "mmd_noise_floor"} <= set(ev.extra)
    assert ev.extra["mmd_noise_floor"] < ev.value  # an untrained-scale tiny generator is far from the teacher
    assert tiny.evaluate(_predict(tiny.module)).value == ev.value  # fixed evaluation noise


def test_calibration_covers_one_step_and_training_inputs(tiny):
    x = tiny.calibration_data(64)
    assert x.shape == (64, 5) and x.dtype == np.float32
    c_noise = x[:, 2]
    assert np.sum(np.isclose(c_noise, np.log(80.0) / 4)) == 32  # half are one-step inputs at sigma = 80
    assert np.all(np.abs(x) < 10)  # y enters pre-scaled by c_in, so the packed input stays O(1)


def test_bad_options_are_user_errors():
    with pytest.raises(EdgesmithError, match="n_eval"):
        get_producer("ncvsd", n_eval=3)
    with pytest.raises(EdgesmithError, match="dim"):
        get_producer("ncvsd", dim=0)
    with pytest.raises(EdgesmithError, match="non-finite"):
        p = get_producer("ncvsd", tiny=True)
        p.evaluate(lambda x: np.full((len(x), 2), np.nan, dtype=np.float32))


def test_tiny_deploy_matches_the_torch_metric(tmp_path, tiny):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    # int4 and TVM rows are exercised by the full deploy command; two variants keep this test short
    plan = PlanOptions(tvm=False, variants=("fp32", "int8"))
    out = deploy(DeployOptions("ncvsd", "host-cpu", tmp_path / "r", plan=plan, model_options={"tiny": True},
                               warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref, abs=1e-3)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 0.2
    assert any("outside the graph" in n for n in report["notes"])
