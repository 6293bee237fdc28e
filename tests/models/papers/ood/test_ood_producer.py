"""ood-gauss: config checks, the OOD sets' construction, reproducibility, the paper's pathologies, one deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ood.data import GaussConfig, make_splits


@pytest.fixture(scope="module")
def tiny():
    return get_producer("ood-gauss", seed=0, tiny=True).build()


def torch_predict(module):
    return lambda x: module(torch.from_numpy(np.asarray(x, dtype=np.float32))).detach().numpy()


def test_config_rejects_bad_fields_and_round_trips_through_json():
    with pytest.raises(EdgesmithError):
        GaussConfig(dim=2)
    with pytest.raises(EdgesmithError):
        GaussConfig(far_scale=0.5)
    with pytest.raises(EdgesmithError):
        GaussConfig.from_dict({"bogus": 1})
    cfg = GaussConfig(shift=1.5)
    assert GaussConfig.from_json(cfg.to_json()) == cfg


def test_ood_sets_move_only_the_directions_they_claim_to():
    s = make_splits(GaussConfig.tiny(), seed=3)
    assert np.all(s["nuisance-collapsed"][:, 2:] == 0)
    # the shift lies in the label-irrelevant dimensions: the discriminative plane keeps ID statistics
    assert abs(s["irrelevant-shift"][:, 2:].mean(0)).sum() > 1.0
    np.testing.assert_allclose(s["irrelevant-shift"][:, :2].std(0), s["x_test"][:, :2].std(0), rtol=0.25)
    # the far set lies beyond every ID class mean
    radius = lambda x: np.linalg.norm(x[:, :2], axis=1).mean()  # noqa: E731
    assert radius(s["far-discriminative"]) > 2 * radius(s["x_test"])


def test_input_shape_comes_from_the_config_without_building():
    p = get_producer("ood-gauss", tiny=True)
    assert p.input_shape == (16,) and not hasattr(p, "module_")


def test_same_seed_gives_the_same_model_outputs(tiny):
    other = get_producer("ood-gauss", seed=0, tiny=True)
    x = tiny.calibration_data(8)
    module = other._fit()  # train again (not from the cache) to check determinism itself
    np.testing.assert_array_equal(torch_predict(module)(x), torch_predict(tiny.module)(x))


def test_uncertainty_scores_fail_far_out_and_mahalanobis_fails_on_collapsed_nuisance(tiny):
    ev = tiny.evaluate(torch_predict(tiny.module))
    a = ev.extra["auroc"]
    assert ev.extra["id_accuracy"] > 0.9
    assert a["far-discriminative"]["msp"] <= 0.5 and a["far-discriminative"]["energy"] <= 0.5
    assert a["far-discriminative"]["mahalanobis"] > 0.9
    assert a["nuisance-collapsed"]["mahalanobis"] < 0.3 < 0.7 < a["nuisance-collapsed"]["oracle"]
    assert ev.value == pytest.approx(ev.extra["pooled_auroc"]["mahalanobis"])


def test_split_outputs_rejects_outputs_of_another_shape(tiny):
    with pytest.raises(EdgesmithError):
        tiny.split_outputs(np.zeros((4, 3)))


def test_tiny_deploy_reports_the_metric_and_the_ood_monitor(tmp_path, tiny):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    out = deploy(DeployOptions("ood-gauss", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    rows = {r["variant"]: r for r in report["results"]}
    ref = tiny.evaluate(torch_predict(tiny.module)).value
    assert rows["fp32"]["evaluation"]["value"] == pytest.approx(ref, abs=1e-6)
    assert abs(rows["int8"]["evaluation"]["value"] - ref) < 0.15
    for r in rows.values():
        assert set(r["ood"]["auroc"]) == {"msp", "energy", "mahalanobis", "oracle"}
    assert rows["fp32"]["ood"]["shift_vs_fp32"]["mahalanobis"]["ks_id"] < 0.02
    assert "ood_scores.png" in {p.name for p in out.iterdir()}
    assert "## OOD scores" in (out / "report.md").read_text()
