"""The Numba tree engine against a brute-force transcription of GBRL's fitter, and its contract."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.common import EdgesmithError
from edgesmith.models.gbrl import GBTEnsemble, binning
from gbrl_reference import fit_reference, gbrl_thresholds


def _data(rng, n=160, d=5, k=3):
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[:, 2] = np.round(X[:, 2])  # a feature with many ties, so repeated thresholds get dropped
    g = rng.normal(size=(n, k)).astype(np.float32)
    g[:, 0] += 2.0 * (X[:, 1] > 0.3)
    g[:, 1] -= 1.5 * (X[:, 3] < -0.2)
    return X, g


@pytest.mark.parametrize("n_bins", [256, 16])
def test_thresholds_follow_gbrl_quantile_rule_and_bins_encode_comparisons(rng, n_bins):
    X, _ = _data(rng)
    thr, n_thr, xb = binning.quantile_bins(X, n_bins)
    for f in range(X.shape[1]):
        ref = gbrl_thresholds(X[:, f], n_bins - 1)
        assert n_thr[f] == len(ref)
        np.testing.assert_array_equal(thr[f, : n_thr[f]], ref)
        for j in range(n_thr[f]):  # x > t_j exactly when bin > j
            np.testing.assert_array_equal(X[:, f] > thr[f, j], xb[f] > j)
    np.testing.assert_array_equal(binning.apply_bins(X, thr, n_thr), xb)


@pytest.mark.parametrize("n,n_bins", [(160, 256), (900, 24)])  # one row per bin / many rows per bin
@pytest.mark.parametrize("policy", ["greedy", "oblivious"])
@pytest.mark.parametrize("score", ["cosine", "l2"])
def test_tree_matches_brute_force_reference(rng, policy, score, n, n_bins):
    X, g = _data(rng, n=n)
    ens = GBTEnsemble(5, 3, max_depth=3, n_bins=n_bins, split_score=score, grow_policy=policy).fit_step(X, g)
    feat, thr, leaves = fit_reference(X, g, 3, score, policy, n_bins=n_bins)
    t = ens.tree(0)
    np.testing.assert_array_equal(t["threshold"], thr)
    np.testing.assert_array_equal(t["feature"][np.isfinite(thr)], feat[np.isfinite(thr)])
    np.testing.assert_allclose(t["leaves"], leaves, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("policy", ["greedy", "oblivious"])
def test_reused_histogram_buffers_do_not_leak_between_trees(rng, policy):
    big_X, big_g = _data(rng, n=2000)
    X, g = _data(rng, n=90)  # fewer distinct values than bins: the buffers' upper bins go unused
    ens = GBTEnsemble(5, 3, max_depth=3, grow_policy=policy).fit_step(big_X, big_g).fit_step(X, g)
    _, thr, leaves = fit_reference(X, g, 3, "cosine", policy)
    np.testing.assert_array_equal(ens.tree(1)["threshold"], thr)
    np.testing.assert_allclose(ens.tree(1)["leaves"], leaves, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("policy", ["greedy", "oblivious"])
def test_min_data_in_leaf_matches_reference_and_holds_on_training_rows(rng, policy):
    X, g = _data(rng, n=120)
    ens = GBTEnsemble(5, 3, max_depth=4, grow_policy=policy, min_data_in_leaf=12).fit_step(X, g)
    feat, thr, _ = fit_reference(X, g, 4, "cosine", policy, min_leaf=12)
    np.testing.assert_array_equal(ens.tree(0)["threshold"], thr)
    # route the training rows; every non-empty leaf reached through a real split holds >= 12 rows
    counts = np.zeros(16, int)
    for x in X:
        node = 0
        for _ in range(4):
            node = 2 * node + 1 + int(x[ens.features[0][node]] > ens.thresholds[0][node])
        counts[node - 15] += 1
    assert all(c == 0 or c >= 12 for c in counts)


def test_predict_is_bias_minus_per_output_lr_times_leaf_sum(rng):
    X, g = _data(rng)
    lr = np.array([0.1, 0.01, 0.5], np.float32)
    ens = GBTEnsemble(5, 3, lr=lr, bias=[1.0, -2.0, 0.5])
    for _ in range(3):
        ens.fit_step(X, g)
    s = ens.leaf_sums(X)
    np.testing.assert_allclose(ens.predict(X), np.array([1.0, -2.0, 0.5]) - lr * s, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ens.predict(X, lr=0.2), np.array([1.0, -2.0, 0.5]) - 0.2 * s, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ens.leaf_sums(X, 0, 1) + ens.leaf_sums(X, 1), s, atol=1e-9)


@pytest.mark.parametrize("policy", ["greedy", "oblivious"])
def test_serial_and_threaded_prediction_agree_and_batch_one_matches(rng, policy):
    X, g = _data(rng, n=300)
    ens = GBTEnsemble(5, 3, grow_policy=policy)
    for i in range(5):
        ens.fit_step(X, g + i)
    a = ens.leaf_sums(X, threads="serial")
    np.testing.assert_array_equal(a, ens.leaf_sums(X, threads="parallel"))
    np.testing.assert_array_equal(a[7:8], ens.leaf_sums(X[7]))


@pytest.mark.parametrize("score", ["cosine", "l2"])
def test_boosting_on_mse_gradients_fits_a_regression_target(rng, score):
    X = rng.uniform(-1, 1, size=(512, 4)).astype(np.float32)
    y = np.stack([np.sin(3 * X[:, 0]), X[:, 1] * X[:, 2]], axis=1).astype(np.float32)
    ens = GBTEnsemble(4, 2, lr=0.3, split_score=score, grow_policy="oblivious")
    mse0 = float(np.mean(y**2))
    for _ in range(60):
        ens.fit_step(X, ens.predict(X) - y)  # d/dpred of 0.5 * (pred - y)^2
    assert float(np.mean((ens.predict(X) - y) ** 2)) < 0.1 * mse0


def test_fitting_is_deterministic(rng):
    X, g = _data(rng)
    a, b = GBTEnsemble(5, 3), GBTEnsemble(5, 3)
    for e in (a, b):
        e.fit_step(X, g).fit_step(X, -g)
    np.testing.assert_array_equal(a.leaves, b.leaves)
    np.testing.assert_array_equal(a.thresholds, b.thresholds)


def test_save_load_is_exact_and_refuses_silent_overwrite(rng, tmp_path):
    X, g = _data(rng)
    ens = GBTEnsemble(5, 3, grow_policy="oblivious", split_score="l2", lr=[0.1, 0.2, 0.3], bias=[1, 2, 3])
    for i in range(70):  # past the first capacity doubling
        ens.fit_step(X, g * (1 + 0.01 * i))
    path = ens.save(tmp_path / "ens.npz")
    back = GBTEnsemble.load(path)
    assert back.params() == ens.params() and back.n_trees == 70
    np.testing.assert_array_equal(back.predict(X), ens.predict(X))
    assert back.size_bytes() == ens.size_bytes()
    with pytest.raises(EdgesmithError, match="already exists"):
        ens.save(path)
    ens.save(path, force=True)


def test_bad_inputs_raise_readable_errors(rng):
    X, g = _data(rng)
    ens = GBTEnsemble(5, 3)
    with pytest.raises(EdgesmithError, match="grads have shape"):
        ens.fit_step(X, g[:, :2])
    with pytest.raises(EdgesmithError, match="inputs have shape"):
        ens.predict(X[:, :4])
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(EdgesmithError, match="NaN"):
        ens.fit_step(bad, g)
    with pytest.raises(EdgesmithError, match="split_score"):
        GBTEnsemble(5, 3, split_score="gini")
    with pytest.raises(EdgesmithError, match="lr"):
        GBTEnsemble(5, 3, lr=[0.1, 0.2])
