"""Distillation loss, class groups and the router module's gating."""
from __future__ import annotations

import math

import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.scaling.distill import ScaledOut, class_groups, group_logits, kd_loss, mlp


def test_kd_loss_matches_hand_computation():
    s = torch.tensor([[1.0, 0.0]])
    t = torch.tensor([[0.0, 1.0]])
    y = torch.tensor([0])
    temp, alpha = 2.0, 0.75
    ps = [math.exp(0.5) / (math.exp(0.5) + 1), 1 / (math.exp(0.5) + 1)]  # softmax(s / 2)
    pt = [ps[1], ps[0]]  # softmax(t / 2) is the mirror image
    kl = sum(p * math.log(p / q) for p, q in zip(pt, ps))
    ce = -math.log(math.e / (math.e + 1))
    expected = alpha * temp**2 * kl + (1 - alpha) * ce
    assert float(kd_loss(s, t, y, temp, alpha)) == pytest.approx(expected, rel=1e-6)


def test_kd_loss_is_zero_kl_when_student_equals_teacher_and_alpha_one():
    logits = torch.randn(5, 10)
    assert float(kd_loss(logits, logits, torch.zeros(5, dtype=torch.long), 4.0, 1.0)) == pytest.approx(0.0, abs=1e-6)


def test_class_groups_are_contiguous_and_cover_every_class():
    assert class_groups(10, 2) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert sum(class_groups(10, 3), []) == list(range(10))
    with pytest.raises(EdgesmithError):
        class_groups(10, 1)


def test_group_logits_give_summed_group_probabilities():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]]))
    g = torch.softmax(group_logits(logits, [[0, 1], [2, 3]]), dim=-1)
    assert torch.allclose(g, torch.tensor([[0.3, 0.7]]), atol=1e-6)


@pytest.mark.parametrize("gating", ["soft", "hard"])
def test_router_gates_sum_to_one_and_outputs_are_a_distribution(gating):
    torch.manual_seed(0)
    m = ScaledOut(mlp(6, (4,), 3), [mlp(6, (5,), n) for n in (2, 3, 2)], gating).eval()
    x = torch.randn(32, 6)
    g = m.gates(x)
    assert torch.allclose(g.sum(-1), torch.ones(32), atol=1e-6)
    if gating == "hard":  # one specialist per sample: a one-hot row
        assert torch.all((g == 0) | (g == 1))
    out = m(x)
    assert out.shape == (32, 7)
    assert torch.allclose(out.sum(-1), torch.ones(32), atol=1e-5)


def test_router_rejects_unknown_gating():
    with pytest.raises(EdgesmithError):
        ScaledOut(mlp(2, (2,), 2), [mlp(2, (2,), 1)] * 2, "top2")
