"""Temporal-distance targets, Spearman, the reward head's packing and the KL used by the mapping."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.founder.grounding import Mapping, RewardHead, TemporalDistance, spearman, temporal_pairs
from edgesmith.models.papers.founder.policy import lambda_returns
from edgesmith.models.papers.founder.world_model import gaussian_kl


def test_temporal_pairs_target_c_over_t_on_one_trajectory_and_one_across():
    tra, ta, trb, tb, target = temporal_pairs(10, 8, 5000, 0.3, np.random.default_rng(0))
    same = tra == trb
    assert np.allclose(target[same], (tb[same] - ta[same]) / 8)
    assert np.all((tb[same] >= ta[same]) & (tb[same] <= 8))
    assert np.all(target[~same] == 1.0)
    assert 0.25 < (~same).mean() < 0.35
    assert target[same].min() == 0.0 and target[same].max() == 1.0  # c = 0 and c = T both occur


def test_temporal_pairs_without_negatives_need_no_second_trajectory():
    tra, _, trb, _, _ = temporal_pairs(1, 4, 100, 0.0, np.random.default_rng(0))
    assert np.all(tra == trb)
    with pytest.raises(EdgesmithError):
        temporal_pairs(1, 4, 100, 0.5, np.random.default_rng(0))


def test_spearman_on_hand_cases():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks of b: 1, 5, 2, 3, 4, so d = (0, -3, 1, 1, 1) and rho = 1 - 6 * 12 / (5 * 24)
    assert spearman([1, 2, 3, 4, 5], [1, 100, 3, 4, 5]) == pytest.approx(0.4)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254)  # ties get average ranks
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0
    with pytest.raises(EdgesmithError):
        spearman([1, 2], [1, 2, 3])


def test_gaussian_kl_is_zero_for_equal_and_matches_closed_form():
    mu, ls = torch.zeros(1, 3), torch.zeros(1, 3)
    assert float(gaussian_kl(mu, ls, mu, ls)) == pytest.approx(0.0)
    # KL(N(1, 1) || N(0, 1)) = 0.5 per dimension
    assert float(gaussian_kl(mu + 1, ls, mu, ls)) == pytest.approx(1.5)


def test_reward_head_unpacks_current_and_goal_embeddings():
    torch.manual_seed(0)
    m, d = Mapping(4, 3, 2, 8), TemporalDistance(5, 8)
    head = RewardHead(m, d, 4).eval()
    x = torch.randn(6, 8)
    with torch.no_grad():
        r = head(x)
        expected = -d(m.state(x[:, :4]), m.state(x[:, 4:]))
    assert r.shape == (6, 1) and torch.equal(r, expected) and torch.all((r <= 0) & (r >= -1))


def test_lambda_returns_with_lambda_one_are_discounted_sums():
    rewards = torch.tensor([[1.0], [2.0]])
    values = torch.tensor([[0.0], [0.0], [10.0]])
    ret = lambda_returns(rewards, values, 0.5, 1.0)
    assert torch.allclose(ret.squeeze(-1), torch.tensor([1 + 0.5 * 2 + 0.25 * 10, 2 + 0.5 * 10]))
