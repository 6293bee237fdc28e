"""The scaling-student producer: roles, config validation, reproducibility, export and deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
from edgesmith.hardware import PlanOptions
from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.scaling.producer import ScalingConfig


def _predict(p):
    return lambda x: p.module(torch.from_numpy(x)).detach().numpy()


@pytest.fixture(scope="module", autouse=True)
def _own_cache(tmp_path_factory):
    # one fresh cache for this module: the tiny teacher is trained once, and no user cache is touched
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGESMITH_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def test_config_round_trips_and_rejects_bad_values():
    cfg = ScalingConfig(width=12, gating="hard")
    assert ScalingConfig.from_dict(json.loads(cfg.to_json())) == cfg
    for bad in (dict(width=0), dict(alpha=1.5), dict(temperature=0.0), dict(gating="top2"), dict(n_experts=11)):
        with pytest.raises(EdgesmithError):
            ScalingConfig(**bad)


def test_router_and_teacher_together_is_a_user_error():
    with pytest.raises(EdgesmithError):
        get_producer("scaling-student", router=True, teacher=True)


def test_input_shape_needs_no_training():
    p = get_producer("scaling-student", width=8)
    assert p.input_shape == (64,) and not hasattr(p, "module_")


def test_student_width_sets_parameter_count_and_build_is_reproducible():
    a = get_producer("scaling-student", tiny=True, width=8).build()
    assert a.n_params() == 64 * 8 + 8 + 8 * 8 + 8 + 8 * 10 + 10
    x = a.calibration_data(16)
    first = _predict(a)(x)
    b = get_producer("scaling-student", tiny=True, width=8)
    b.build()  # loads the cache written by ``a``
    assert np.array_equal(first, _predict(b)(x))
    a._path("student").unlink()
    c = get_producer("scaling-student", tiny=True, width=8).build()  # retrained from scratch
    assert np.array_equal(first, _predict(c)(x))


def test_router_model_outputs_class_probabilities_and_scores_accuracy():
    p = get_producer("scaling-student", tiny=True, width=8, router=True, gating="hard").build()
    out = _predict(p)(p.calibration_data(8))
    assert out.shape == (8, 10) and np.allclose(out.sum(1), 1.0, atol=1e-5)
    ev = p.evaluate(_predict(p))
    assert 0.0 <= ev.value <= 1.0 and ev.n_samples == 360


def test_wrong_input_width_is_a_user_error():
    p = get_producer("scaling-student", tiny=True, width=8)
    with pytest.raises(EdgesmithError):
        p.check_input(np.zeros((2, 32), np.float32))


def test_tiny_router_deploys_and_fp32_row_matches_torch(tmp_path):
    out = deploy(DeployOptions("scaling-student", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True, "router": True, "width": 8}, warmup=2, reps=5,
                               batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref, abs=1e-9)
    assert abs(rows["int8"] - ref) < 0.05
    assert "int4" in rows
