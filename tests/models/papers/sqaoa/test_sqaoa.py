"""SQAOA: simulator correctness, nucleus sampling, the recursion, brute force, the exported module."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.sqaoa.graphs import agreement, brute_force, check_graph, erdos_renyi_signed, pack, set_partitions
from edgesmith.models.papers.sqaoa.module import SqaoaCircuit, marginal
from edgesmith.models.papers.sqaoa.onehot import OneHotObjective, onehot_tables
from edgesmith.models.papers.sqaoa.sqaoa import SqaoaObjective, nucleus, subproblem, tree_expectation
from edgesmith.models.papers.sqaoa.statevector import (apply_1q, apply_cnot, gate_level_probs, mixer_apply, mixer_matrix, rh, rx, rz,
                                      subproblem_probs, zero_state)

TRIANGLE = np.array([[0, 1, -1], [1, 0, 1], [-1, 1, 0]], dtype=float)


def test_gates_preserve_the_statevector_norm():
    rng = np.random.default_rng(0)
    psi = zero_state(4)
    for _ in range(20):
        q = int(rng.integers(4))
        gate = [rz, rx, rh][int(rng.integers(3))](float(rng.uniform(-3, 3)))
        psi = apply_1q(psi, gate, q)
        a, b = rng.choice(4, 2, replace=False)
        psi = apply_cnot(psi, int(a), int(b))
    assert np.isclose(np.linalg.norm(psi), 1.0, atol=1e-12)


def test_rh_half_pi_is_minus_i_hadamard_like_the_authors_gate():
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    assert np.allclose(rh(np.pi / 2), -1j * h)


def test_fast_subproblem_simulation_matches_the_gate_by_gate_circuit():
    rng = np.random.default_rng(1)
    w = erdos_renyi_signed(5, 0.7, 0.5, rng)
    theta = rng.uniform(-2, 2, 6)
    for nodes in ([0, 1, 2, 3, 4], [1, 3, 4]):
        assert np.allclose(subproblem_probs(w, nodes, theta, 2), gate_level_probs(w, nodes, theta, 2), atol=1e-12)


def test_mixer_paths_match_the_dense_kronecker_unitary():
    rng = np.random.default_rng(2)
    for q in (3, 11):  # dense-Hadamard path and the 4-qubit-block path
        psi = rng.normal(size=2 ** q) + 1j * rng.normal(size=2 ** q)
        assert np.allclose(mixer_apply(psi, 0.7), mixer_matrix(q, 0.7) @ psi, atol=1e-12)


def test_expectation_matches_brute_force_enumeration_on_three_qubits():
    # with t = 1 (no truncation) the recursion must equal summing, over all 2^3 first outcomes and
    # all second-level outcomes, path probability times the agreement of the clustering it builds
    theta = np.array([0.4, 0.9, 0.3, 1.1, 0.2, 0.5, 0.7, -0.3, 0.25])[:6]  # per-level p = 1, L = 2
    obj = SqaoaObjective(TRIANGLE, p=1, t=1.0)
    th = obj.level_params
    expected = 0.0
    p0 = gate_level_probs(TRIANGLE, [0, 1, 2], th(theta, 0), 1)
    for o0, bits0 in enumerate(itertools.product([0, 1], repeat=3)):
        rest = [v for v, b in enumerate(bits0) if b == 1]
        labels = np.array([0 if b == 0 else 1 for b in bits0])
        if len(rest) < 2:
            expected += p0[o0] * agreement(TRIANGLE, np.where(labels == 0, 0, 1 + np.arange(3)))
            continue
        p1 = gate_level_probs(TRIANGLE, rest, th(theta, 1), 1)
        for o1, bits1 in enumerate(itertools.product([0, 1], repeat=len(rest))):
            lab = labels.copy()
            for v, b in zip(rest, bits1):
                lab[v] = 1 if b == 0 else 2
            expected += p0[o0] * p1[o1] * agreement(TRIANGLE, lab)
    assert np.isclose(obj(theta), expected, atol=1e-12)


def test_nucleus_keeps_at_least_mass_t_and_renormalises():
    rng = np.random.default_rng(3)
    for size in (8, 64, 8192):  # 8192 takes the partial-sort path
        p = rng.random(size) ** 6
        p /= p.sum()
        for t in (0.05, 0.3, 0.9):
            keep, pr = nucleus(p, t)
            assert p[keep].sum() >= t - 1e-12
            assert p[keep[:-1]].sum() < t  # minimal: without the last kept outcome the mass is short of t
            assert np.isclose(pr.sum(), 1.0)
            assert np.all(np.diff(p[keep]) <= 0)


def test_nucleus_breaks_ties_by_lowest_index():
    keep, pr = nucleus(np.array([0.25, 0.25, 0.25, 0.25]), 0.3)
    assert keep.tolist() == [0, 1] and np.allclose(pr, [0.5, 0.5])


def test_nucleus_rejects_bad_threshold_and_empty_mass():
    with pytest.raises(EdgesmithError):
        nucleus(np.ones(4) / 4, 0.0)
    with pytest.raises(EdgesmithError):
        nucleus(np.zeros(4), 0.5)


def test_brute_force_on_a_hand_case():
    # a frustrated triangle (+, +, -): any clustering violates one pair, so the optimum is 2
    best, labels = brute_force(TRIANGLE)
    assert best == 2.0 and agreement(TRIANGLE, labels) == 2.0
    # Bell numbers count the clusterings
    assert [len(set_partitions(n)) for n in range(1, 7)] == [1, 2, 5, 15, 52, 203]


def test_step_costs_add_up_to_the_agreement_of_each_path():
    rng = np.random.default_rng(4)
    w = erdos_renyi_signed(4, 1.0, 0.5, rng)
    sp = subproblem(w, 0b1111)
    for o, bits in enumerate(itertools.product([0, 1], repeat=4)):
        # at the last level the 1s form one cluster: the step cost is the whole agreement
        assert np.isclose(sp.cost_last[o], agreement(w, np.array(bits)))


def test_single_cluster_level_count_gives_positive_weight_sum():
    w = TRIANGLE
    assert tree_expectation([w], 0, 0.1, None)[0] == 2.0


def test_bad_graph_and_bad_cluster_count_are_user_errors():
    with pytest.raises(EdgesmithError):
        check_graph(np.array([[0, 1], [2, 0]]))
    with pytest.raises(EdgesmithError):
        SqaoaObjective(TRIANGLE, p=1, t=0.1, k=5)
    with pytest.raises(EdgesmithError):
        onehot_tables(np.zeros((6, 6)), 4)  # 24 qubits


def test_onehot_tables_score_only_valid_clusterings():
    cost, agree = onehot_tables(TRIANGLE, 2)
    # 000000 puts no node in a cluster (infeasible): agreement 0 and a penalised objective below it
    assert agree[0] == 0 and cost[0] < 0
    # nodes 0, 1, 2 in clusters (0, 0, 1): bits 10 10 01 -> agreement of that clustering
    idx = int("101001", 2)
    assert agree[idx] == agreement(TRIANGLE, [0, 0, 1])
    obj = OneHotObjective(TRIANGLE, 2, 1, 0.1)
    assert np.isclose(obj.probs(np.array([0.3, 0.1])).sum(), 1.0)


def test_module_marginal_equals_the_subproblem_circuit():
    rng = np.random.default_rng(5)
    w = erdos_renyi_signed(5, 0.6, 0.5, rng)
    theta = rng.uniform(-1.5, 1.5, 6)
    module = SqaoaCircuit(5, 2, theta)
    nodes = [0, 2, 3]
    keep = np.isin(np.arange(5), nodes)
    x = torch.tensor(pack(w * (keep[:, None] & keep[None, :]))[None], dtype=torch.float32)
    out = module(x).numpy()[0]
    assert np.isclose(out.sum(), 1.0, atol=1e-5)
    assert np.allclose(marginal(out, 5, nodes), subproblem_probs(w, nodes, theta, 2), atol=1e-5)
