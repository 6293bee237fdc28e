"""OOD scores and AUROC: hand-computed cases and the defining properties of each score."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ood.scores import auroc, energy, fit_mahalanobis, msp, oracle_probe_auroc


def test_auroc_matches_a_hand_counted_case_with_ties():
    # pairs (pos, neg): (3,2) win, (3,0) win, (1,2) loss, (1,0) win, (2,2) tie, (2,0) win -> 4.5 / 6
    assert auroc([3, 1, 2], [2, 0]) == pytest.approx(4.5 / 6)
    assert auroc([1.0], [1.0]) == 0.5
    assert auroc([0.0], [1.0]) == 0.0


def test_auroc_agrees_with_sklearn_on_random_scores(rng):
    from sklearn.metrics import roc_auc_score

    pos, neg = rng.normal(0.5, 1, 200).round(1), rng.normal(0, 1, 150).round(1)  # rounding makes ties
    expect = roc_auc_score(np.r_[np.ones(200), np.zeros(150)], np.r_[pos, neg])
    assert auroc(pos, neg) == pytest.approx(expect, abs=1e-12)


def test_auroc_rejects_empty_or_nan_scores():
    with pytest.raises(EdgesmithError):
        auroc([], [1.0])
    with pytest.raises(EdgesmithError):
        auroc([np.nan], [1.0])


def test_energy_is_logsumexp_and_msp_is_max_softmax():
    z = np.array([[0.0, 0.0], [2.0, 0.0], [1000.0, 0.0]])
    np.testing.assert_allclose(energy(z)[:2], [np.log(2), np.log(np.exp(2) + 1)])
    assert np.isfinite(energy(z)).all()  # large logits do not overflow
    np.testing.assert_allclose(msp(z), [0.5, np.exp(2) / (np.exp(2) + 1), 1.0])
    np.testing.assert_allclose(msp(z + 7.0), msp(z))  # MSP ignores a shift of all logits, energy does not
    with pytest.raises(EdgesmithError):
        msp(np.zeros((3, 1)))


def test_mahalanobis_is_minus_the_smallest_class_distance(rng):
    x = np.r_[rng.normal(0, 1, (500, 2)), rng.normal(0, 1, (500, 2)) + [10, 0]]
    y = np.r_[np.zeros(500), np.ones(500)]
    fit = fit_mahalanobis(x, y)
    centred = x - fit.means[y.astype(int)]
    np.testing.assert_allclose(np.linalg.inv(fit.precision), centred.T @ centred / len(x), rtol=1e-3, atol=1e-3)
    probe = np.array([fit.means[0], fit.means[1] + [0, 2.0]])
    s = fit.score(probe)
    assert s[0] == pytest.approx(0.0, abs=1e-9)
    d = probe[1] - fit.means[1]
    assert s[1] == pytest.approx(-d @ fit.precision @ d)
    with pytest.raises(EdgesmithError):
        fit.score(np.zeros((2, 3)))


def test_oracle_probe_separates_linearly_separable_features_and_not_identical_ones(rng):
    a = rng.normal(0, 1, (200, 4))
    assert oracle_probe_auroc(a, a + [6, 0, 0, 0]) > 0.99
    assert abs(oracle_probe_auroc(a, rng.normal(0, 1, (200, 4))) - 0.5) < 0.15
