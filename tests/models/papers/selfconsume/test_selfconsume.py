"""Self-consuming loop pieces: curation probabilities, the BT loss, the attacks, reproducibility."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.selfconsume.attacks import choose_flips, flip, n_flips
from edgesmith.models.papers.selfconsume.loop import LoopConfig, curate, curation_probs, run_loop, softmax
from edgesmith.models.papers.selfconsume.reward_model import (RewardTrainConfig, bt_loss, make_pairs, pairwise_accuracy,
                                             train_reward_model)
from edgesmith.models.papers.selfconsume.world import real_data, true_reward

TINY_LOOP = LoopConfig(rounds=2, k=60, n_real=200, n_eval=200, reward_steps=10)


def test_curation_probabilities_sum_to_one_and_mix_benign_with_adversarial():
    r = np.random.default_rng(0).normal(size=50) * 3
    for phi in (0.0, 0.1, 0.3, 1.0):
        p = curation_probs(r, phi)
        assert np.isclose(p.sum(), 1.0) and (p >= 0).all()
    assert np.allclose(curation_probs(r, 0.0), softmax(r))
    assert np.allclose(curation_probs(r, 1.0), softmax(-r))
    # the adversarial share moves probability towards the low-reward samples
    assert curation_probs(r, 0.3)[np.argmin(r)] > curation_probs(r, 0.0)[np.argmin(r)]


def test_curate_draws_distinct_samples_and_topk_takes_the_best():
    r = np.arange(10.0)
    idx = curate(r, 4, 0.1, "sample", np.random.default_rng(0))
    assert len(set(idx.tolist())) == 4
    assert sorted(curate(r, 3, 0.0, "topk", None).tolist()) == [7, 8, 9]
    with pytest.raises(EdgesmithError):
        curation_probs(r, 1.5)
    with pytest.raises(EdgesmithError):
        curate(r, 3, 0.3, "topk", None)


def test_bt_loss_on_a_hand_computed_case():
    rx, ry = torch.tensor([1.0]), torch.tensor([0.0])
    # o = 0 (x preferred): -log s(1) = log(1 + e^-1); o = 1: -log s(-1) = log(1 + e)
    assert bt_loss(rx, ry, torch.tensor([0.0])).item() == pytest.approx(math.log1p(math.exp(-1)), abs=1e-6)
    assert bt_loss(rx, ry, torch.tensor([1.0])).item() == pytest.approx(math.log1p(math.e), abs=1e-6)
    both = bt_loss(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0]), torch.tensor([0.0, 1.0])).item()
    assert both == pytest.approx((math.log1p(math.exp(-1)) + math.log1p(math.e)) / 2, abs=1e-6)


def test_pairs_are_labelled_by_the_true_reward():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 2))
    pairs, o = make_pairs(x, 100, rng)
    r = true_reward(x)
    assert (pairs[:, 0] != pairs[:, 1]).all()
    assert np.array_equal(o == 1, r[pairs[:, 1]] > r[pairs[:, 0]])


@pytest.mark.parametrize("kind", ["random", "gap", "influence"])
def test_attacker_flips_exactly_the_budget(kind):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 2)) + [2, 0]
    pairs, o = make_pairs(x, 101, rng)
    clean = train_reward_model(x, pairs, o, RewardTrainConfig(steps=5), seed=0) if kind == "influence" else None
    idx = choose_flips(kind, x, pairs, o, 0.2, rng, clean_model=clean)
    assert len(idx) == n_flips(101, 0.2) == 20 and len(set(idx.tolist())) == 20
    assert int((flip(o, idx) != o).sum()) == 20


def test_gap_attack_flips_the_most_confident_pairs():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 2))
    pairs, o = make_pairs(x, 50, rng)
    r = true_reward(x)
    gap = np.abs(r[pairs[:, 0]] - r[pairs[:, 1]])
    idx = choose_flips("gap", x, pairs, o, 0.2, rng)
    assert gap[idx].min() >= np.delete(gap, idx).max()


def test_reward_model_learns_the_preference_order():
    rng = np.random.default_rng(4)
    x = real_data(300, rng)
    pairs, o = make_pairs(x, 600, rng)
    model = train_reward_model(x, pairs, o, RewardTrainConfig(steps=60), seed=0)
    with torch.no_grad():
        r_hat = model(torch.tensor(x, dtype=torch.float32))[:, 0].numpy()
    r = true_reward(x)
    assert pairwise_accuracy(r_hat[pairs[:, 0]], r_hat[pairs[:, 1]], r[pairs[:, 0]], r[pairs[:, 1]]) > 0.85


def test_loop_is_reproducible_for_a_seed():
    a, b = run_loop(TINY_LOOP, 0), run_loop(TINY_LOOP, 0)
    assert a == b and len(a["expected_reward"]) == TINY_LOOP.rounds + 1
    assert run_loop(TINY_LOOP, 1)["expected_reward"] != a["expected_reward"]


def test_bad_loop_config_is_a_user_error():
    with pytest.raises(EdgesmithError):
        LoopConfig(attack="bogus")
    with pytest.raises(EdgesmithError):
        LoopConfig(real_fraction=1.0)
    with pytest.raises(EdgesmithError):
        n_flips(10, 1.2)
