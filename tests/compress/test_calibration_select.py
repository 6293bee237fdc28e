"""Calibration-data selectors: registry, seeding, class balance, the generalised influence score, wiring."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgesmith.compress.calibration_select import (
    influence_scores, model_features, select_calibration, select_indices, selector_names,
)
from edgesmith.common import EdgesmithError


def _two_subspace_pool(n=200, d=10, seed=0):
    """Class 0 varies in the first half of the coordinates, class 1 in the second half."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    x = rng.standard_normal((n, d))
    x[labels == 0, d // 2:] = 0
    x[labels == 1, : d // 2] = 0
    return x.astype(np.float32), labels


def test_registry_lists_the_three_selectors():
    assert {"first", "random", "influence"} <= set(selector_names())


def test_first_and_random_selectors():
    pool = np.arange(50, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(select_indices("first", pool, 5), np.arange(5))
    a = select_indices("random", pool, 10, seed=3)
    assert len(set(a.tolist())) == 10 and np.all(np.diff(a) > 0)
    np.testing.assert_array_equal(a, select_indices("random", pool, 10, seed=3))
    assert not np.array_equal(a, select_indices("random", pool, 10, seed=4))
    assert len(select_indices("random", pool, 500)) == 50  # capped at the pool


def test_influence_score_prefers_samples_in_their_own_class_subspace():
    x, y = _two_subspace_pool()
    s = influence_scores(x, y)
    assert np.all(s > 0.5)
    wrong = y.copy()
    wrong[:5] = 1 - wrong[:5]  # five mislabelled samples lie in the other class's subspace
    s = influence_scores(x, wrong)
    assert np.all(s[:5] < 0) and np.median(s[5:]) > 0.5


def test_influence_score_with_one_class_ranks_principal_subspace_energy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 6)) * np.array([10, 10, 0.1, 0.1, 0.1, 0.1])
    outlier = np.zeros((1, 6))
    outlier[0, 4] = 5.0
    s = influence_scores(np.vstack([x, outlier]))
    assert s[-1] < np.median(s[:-1])


def test_influence_selection_is_class_balanced_and_top_scored():
    x, y = _two_subspace_pool(seed=1)
    x[0] = x[0] + 3.0  # mixed across both subspaces: a low score
    idx = select_indices("influence", x, 20, features=x, labels=y)
    assert len(idx) == 20 and 0 not in idx
    share = np.mean(y == 1)
    assert abs(np.mean(y[idx] == 1) - share) <= 1 / 20 + 1e-9


def test_selector_errors_are_readable():
    pool = np.zeros((4, 2), np.float32)
    with pytest.raises(EdgesmithError, match="unknown calibration selector"):
        select_indices("best", pool, 2)
    with pytest.raises(EdgesmithError, match="at least 1"):
        select_indices("random", pool, 0)
    with pytest.raises(EdgesmithError, match="labels"):
        select_indices("influence", pool, 2, labels=np.zeros(3))
    with pytest.raises(EdgesmithError, match="NaN"):
        select_indices("first", np.full((3, 2), np.nan, np.float32), 2)


def test_model_features_are_the_input_of_the_last_linear_and_labels_the_argmax():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)).eval()
    x = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    feats, labels = model_features(net, x, batch=4)
    with torch.no_grad():
        hidden = torch.relu(net[0](torch.from_numpy(x))).numpy()
        want = net(torch.from_numpy(x)).argmax(1).numpy()
    np.testing.assert_allclose(feats, hidden, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(labels, want)


def test_select_calibration_first_is_the_producers_own_order(digits):
    np.testing.assert_array_equal(select_calibration(digits, 16, "first"), digits.calibration_data(16))
    chosen = select_calibration(digits, 16, "influence", seed=0)
    assert chosen.shape == (16, 64)
    pool = digits.calibration_data(8 * 16)
    assert all(any(np.array_equal(c, p) for p in pool) for c in chosen)  # drawn from the training pool


def test_deploy_options_and_cli_take_the_selector():
    from edgesmith.bench.cli import build_parser
    from edgesmith.bench.recipe import deploy_options as _deploy_options
    from edgesmith.bench.pipeline.deploy import DeployOptions

    with pytest.raises(EdgesmithError, match="calibration selector"):
        DeployOptions("digits-mlp", "host-cpu", "x", calibration_select="best")
    args = build_parser().parse_args(["deploy", "digits-mlp", "--target", "host-cpu", "--calibration-select",
                                      "influence"])
    assert _deploy_options(args, {}).calibration_select == "influence"
    args = build_parser().parse_args(["deploy", "digits-mlp", "--target", "host-cpu"])
    assert _deploy_options(args, {}).calibration_select == "first"
