"""CTRL toy world, critic and producer: GRPO advantages, the generator's edits, critique masks, deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ctrl.config import CtrlConfig
from edgesmith.models.papers.ctrl.critic import FEATURES, N_CRITIQUES, CriticNet, critique_masks, encode, masked_log_probs
from edgesmith.models.papers.ctrl.train import grpo_advantages, iterate, random_critique_probs, random_policy
from edgesmith.models.papers.ctrl.world import (
    FIX_TYPES, P, Problem, candidate_edits, passes, passing_critiques, revise, run, sample_problems,
)


def _problem(solution, buggy, loc, bug_type, visible=(0, 3, 7, 11, 16)) -> Problem:
    return Problem(tuple(solution), tuple(buggy), visible, loc, bug_type)


def test_grpo_advantages_sum_to_zero_per_group_with_unit_spread():
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, size=(50, 8)).astype(float)
    rewards[0] = 1.0  # a group where every critique worked
    adv = grpo_advantages(rewards)
    np.testing.assert_allclose(adv.sum(axis=1), 0.0, atol=1e-9)
    varied = rewards.std(axis=1) > 0
    np.testing.assert_allclose(adv[varied].std(axis=1), 1.0, atol=1e-6)
    assert np.all(adv[0] == 0.0)  # equal rewards say nothing about which critique is better


def test_grpo_advantages_reject_groups_of_one():
    with pytest.raises(ValueError):
        grpo_advantages(np.ones((4, 1)))


@pytest.mark.parametrize("fix_type", range(len(FIX_TYPES)))
def test_generator_applies_exactly_the_hinted_edit(fix_type):
    prog = ((0, 3), (2, 5), (3, 9), (1, 4))  # ADD 3, MUL 5, XOR 9, SUB 4
    prob = _problem(((0, 1),), prog, 0, 0)
    loc = 1
    new = revise(prog, prob, (loc, fix_type))
    assert new in candidate_edits(prog, loc, fix_type)
    if fix_type == 0:  # only the constant at loc changed
        assert len(new) == len(prog) and [i for i in range(4) if new[i] != prog[i]] == [loc]
        assert new[loc][0] == prog[loc][0] and new[loc][1] != prog[loc][1]
    elif fix_type == 1:  # only the operator at loc changed
        assert [i for i in range(4) if new[i] != prog[i]] == [loc]
        assert new[loc][1] == prog[loc][1] and new[loc][0] != prog[loc][0]
    elif fix_type == 2:
        assert new == (prog[0], prog[2], prog[1], prog[3])
    else:
        assert new == (prog[0], prog[2], prog[3])


def test_generator_without_a_critique_guesses_the_last_constant_and_ignores_impossible_hints():
    prog = ((0, 3), (2, 5), (1, 4))
    prob = _problem(prog[:2] + ((1, 6),), prog, 2, 0)
    assert revise(prog, prob, None) == prog[:2] + ((1, 6),)
    assert revise(prog, prob, (2, 2)) == prog  # no step after the last to swap with
    assert revise(prog, prob, (5, 0)) == prog  # past the program's end


def test_correct_critique_fixes_a_single_bug_program():
    solution = ((0, 3), (2, 5), (3, 9), (1, 4))
    cases = [(((0, 3), (2, 7), (3, 9), (1, 4)), 1, 0), (((0, 3), (3, 5), (3, 9), (1, 4)), 1, 1),
             (((0, 3), (3, 9), (2, 5), (1, 4)), 1, 2), (((0, 3), (2, 5), (0, 8), (3, 9), (1, 4)), 2, 3)]
    for buggy, loc, fix in cases:
        prob = _problem(solution, buggy, loc, fix)
        assert not passes(buggy, prob)
        assert passes(revise(buggy, prob, (loc, fix)), prob)
    # over random problems the visible tests very rarely admit an impostor edit that fails the hidden ones
    probs = sample_problems(300, 11)
    fixed = [passes(revise(p.buggy, p, (p.bug_loc, p.bug_type)), p) for p in probs]
    assert np.mean(fixed) > 0.97
    assert all(f for f, p in zip(fixed, probs) if FIX_TYPES[p.bug_type] in ("SWAP", "DELETE"))


def test_sampled_problems_are_really_buggy_and_reproducible():
    a, b = sample_problems(50, 3), sample_problems(50, 3)
    assert a == b
    assert not any(passes(p.buggy, p) for p in a)
    assert all(np.array_equal(run(p.solution, np.arange(P)), p.expected_all) for p in a)


def test_random_critique_probabilities_sum_to_one_over_existing_critiques():
    for prog in (((0, 1),), ((0, 1), (2, 3), (3, 4)), tuple((1, k) for k in range(1, 7))):
        p = random_critique_probs(prog)
        assert p.shape == (N_CRITIQUES,)
        assert abs(p.sum() - 1.0) < 1e-12
        assert np.all(p[~critique_masks([prog])[0]] == 0)


def test_passing_critiques_contain_the_true_fix():
    prob = _problem(((0, 3), (2, 5), (3, 9)), ((0, 3), (2, 7), (3, 9)), 1, 0)
    assert passing_critiques(prob.buggy, prob)[1, 0]


def test_critic_encoding_and_masked_probabilities():
    prob = sample_problems(1, 0)[0]
    f = encode(prob.buggy, prob)
    assert f.shape == (FEATURES,) and f.dtype == np.float32
    net = CriticNet(hidden=16)
    mask = torch.from_numpy(critique_masks([prob.buggy]))
    with torch.no_grad():
        p = masked_log_probs(net(torch.from_numpy(f[None])), mask).exp()[0]
    assert abs(float(p.sum()) - 1.0) < 1e-5
    assert float(p[~mask[0]].sum()) == 0.0


def test_iterate_starts_at_zero_and_random_critique_is_seeded():
    probs = sample_problems(40, 2)
    a, b = iterate(probs, random_policy(1), 3), iterate(probs, random_policy(1), 3)
    assert a[0] == 0.0 and len(a) == 4
    np.testing.assert_array_equal(a, b)


def test_config_rejects_bad_values_and_round_trips():
    with pytest.raises(EdgesmithError, match="group"):
        CtrlConfig(group=1)
    with pytest.raises(EdgesmithError, match="no option"):
        CtrlConfig.from_dict({"bogus": 1})
    cfg = CtrlConfig.tiny(3)
    assert CtrlConfig.from_dict(json.loads(cfg.to_json())) == cfg


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))


def test_producer_is_reproducible_and_lists_without_training(own_cache):
    from edgesmith.models import get_producer

    p = get_producer("ctrl-critic", tiny=True)
    assert p.input_shape == (FEATURES,) and not hasattr(p, "module_")
    a = get_producer("ctrl-critic", tiny=True).build().module
    b = get_producer("ctrl-critic", tiny=True)
    b._cache_path().unlink()  # force a second training run
    b.build()
    for (k, va), vb in zip(a.state_dict().items(), b.module.state_dict().values()):
        assert torch.equal(va, vb), k
    with pytest.raises(EdgesmithError):
        p.check_input(np.zeros((2, 7), np.float32))


def test_tiny_deploy_reports_fp32_pass_rate_equal_to_torch(own_cache, tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions
    from edgesmith.models import get_producer
    from edgesmith.models.papers.ctrl.train import torch_predict

    plan = PlanOptions(tvm=False, variants=("fp32", "int8"))
    out = deploy(DeployOptions("ctrl-critic", "host-cpu", tmp_path / "r", plan=plan,
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    p = get_producer("ctrl-critic", tiny=True).build()
    ref = p.evaluate(torch_predict(p.module)).value
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"] if r["runtime"] == "onnxruntime"}
    assert rows["fp32"] == pytest.approx(ref)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) <= 0.1
