"""Paper 3's data model, CNN, training-free influence score, and the noise-cnn producer."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.influence.cnn import TwoPatchCNN, margin, train_gd
from edgesmith.models.papers.influence.config import CnnConfig, NoiseDataConfig
from edgesmith.models.papers.influence.data import covariances, feature_vector, load_splits, noise_bases, sample
from edgesmith.models.papers.influence.score import oracle_influence


def test_atypical_samples_carry_no_feature_and_typical_ones_carry_y_mu():
    cfg = NoiseDataConfig(d=20, n_train=100)
    s = sample(cfg, 100, seed=0)
    assert s.x.shape == (100, 2, 20) and s.x.dtype == np.float32
    assert np.all(s.x[s.atypical, 0] == 0)
    np.testing.assert_allclose(s.x[~s.atypical, 0], s.y[~s.atypical, None] * feature_vector(cfg)[None], rtol=1e-6)


def test_disjoint_covariances_put_each_class_noise_in_its_own_subspace():
    cfg = NoiseDataConfig(d=20, class_dependence=1.0)
    s = sample(cfg, 200, seed=1)
    p_pos, p_neg = noise_bases(20)
    other = np.where((s.y > 0)[:, None], s.xi @ p_neg, s.xi @ p_pos)
    assert np.abs(other).max() < 1e-4
    # same expected noise energy sigma^2 d at both ends of the class-dependence range
    eq = sample(NoiseDataConfig(d=20, class_dependence=0.0), 2000, seed=2)
    dj = sample(cfg, 2000, seed=2)
    assert np.mean(np.sum(eq.xi ** 2, 1)) == pytest.approx(20, rel=0.05)
    assert np.mean(np.sum(dj.xi ** 2, 1)) == pytest.approx(20, rel=0.05)


def test_covariances_match_the_sampler():
    cfg = NoiseDataConfig(d=10, class_dependence=0.5)
    s = sample(cfg, 40000, seed=3)
    for label in (1, -1):
        xi = s.xi[s.y == label].astype(np.float64)
        np.testing.assert_allclose(xi.T @ xi / len(xi), covariances(cfg)[label], atol=0.06)


def test_influence_score_is_zero_for_equal_covariances_and_one_for_disjoint_subspaces():
    for rho, want in ((0.0, 0.0), (1.0, 1.0)):
        cfg = NoiseDataConfig(d=20, class_dependence=rho)
        np.testing.assert_allclose(oracle_influence(sample(cfg, 50, seed=0), cfg), want, atol=1e-6)
    cfg = NoiseDataConfig(d=20, class_dependence=0.5)
    s = oracle_influence(sample(cfg, 500, seed=0), cfg)
    assert 0.0 < s.mean() < 0.5 and s.std() > 0  # partial dependence: a ranking, not a constant


def test_influence_score_rejects_mismatched_dimensions():
    with pytest.raises(EdgesmithError, match="d = "):
        oracle_influence(sample(NoiseDataConfig(d=20), 5, seed=0), NoiseDataConfig(d=40))


def test_configs_validate_and_round_trip():
    with pytest.raises(EdgesmithError, match="even"):
        NoiseDataConfig(d=21)
    with pytest.raises(EdgesmithError, match="class_dependence"):
        NoiseDataConfig(class_dependence=1.5)
    with pytest.raises(EdgesmithError, match="q"):
        CnnConfig(q=0.5)
    cfg = NoiseDataConfig(d=30, atypical=0.25)
    assert NoiseDataConfig.from_dict(json.loads(cfg.to_json())) == cfg
    with pytest.raises(EdgesmithError, match="no option"):
        CnnConfig.from_dict({"width": 3})


def test_cnn_output_is_class_scores_and_margin_is_their_difference():
    cnn = TwoPatchCNN(8, CnnConfig(m=3, q=2.0), seed=0)
    x = torch.randn(5, 2, 8)
    out = cnn(x)
    assert out.shape == (5, 2)
    w = cnn.filters.weight.detach()
    act = torch.relu(x @ w.T) ** 2
    ref = torch.stack([act[..., :3].sum(1).mean(1), act[..., 3:].sum(1).mean(1)], 1)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(margin(cnn, x), out[:, 1] - out[:, 0])


def test_class_dependent_noise_lets_the_cnn_classify_atypical_samples():
    """The paper's claim at small scale: chance with equal covariances, well above with disjoint ones."""
    acc = {}
    for rho in (0.0, 1.0):
        cfg = NoiseDataConfig(d=100, n_train=100, n_test=1000, class_dependence=rho)
        sp = load_splits(cfg)
        cnn = TwoPatchCNN(100, CnnConfig(q=2.0, steps=200), seed=0)
        losses = train_gd(cnn, sp["train"].x, sp["train"].y, CnnConfig(q=2.0, steps=200))
        assert losses[-1] < losses[0]
        with torch.no_grad():
            pred = cnn(torch.from_numpy(sp["test"].x)).argmax(1).numpy()
        at = sp["test"].atypical
        acc[rho] = np.mean(pred[at] == sp["test"].labels01[at])
    assert acc[0.0] < 0.6 and acc[1.0] > 0.7


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))


def test_producer_lists_without_data_and_rebuilds_identically(own_cache):
    from edgesmith.models import get_producer

    p = get_producer("noise-cnn", tiny=True)
    assert p.input_shape == (2, 40) and not hasattr(p, "splits_")
    a = p.build().module.filters.weight.detach().clone()
    q = get_producer("noise-cnn", tiny=True)
    q._cache_path().unlink()
    assert torch.equal(q.build().module.filters.weight, a)
    q._cache_path().write_bytes(b"damaged")  # a damaged cache entry is retrained, not trusted
    assert torch.equal(get_producer("noise-cnn", tiny=True).build().module.filters.weight, a)
    with pytest.raises(EdgesmithError):
        p.check_input(np.zeros((3, 40), np.float32))
    with pytest.raises(EdgesmithError):
        get_producer("noise-cnn", tiny=True, class_dependence=3.0)


def test_tiny_deploy_reports_fp32_accuracy_equal_to_torch(own_cache, tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions
    from edgesmith.models import get_producer

    plan = PlanOptions(tvm=False, variants=("fp32", "int8"))
    out = deploy(DeployOptions("noise-cnn", "host-cpu", tmp_path / "r", plan=plan,
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False,
                               calibration_select="influence"))
    report = json.loads((out / "report.json").read_text())
    p = get_producer("noise-cnn", tiny=True).build()
    with torch.no_grad():
        ref = p.evaluate(lambda x: p.module(torch.from_numpy(x)).numpy()).value
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 0.05
    assert report["options"]["calibration_select"] == "influence"
