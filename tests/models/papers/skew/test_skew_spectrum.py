"""The skew spectrum as pattern counts: families, invariance, expressivity and the literal S_n definition."""
from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.skew.patterns import patterns
from edgesmith.models.papers.skew.spectrum import (
    correlation_bruteforce,
    group_functions,
    injective_count_bruteforce,
    pattern_of_tuple,
    skew_spectrum,
)


def _adj(g, n=None):
    return nx.to_numpy_array(g, nodelist=range(n or g.number_of_nodes()))


def _random_graph(n, p, seed):
    return _adj(nx.gnp_random_graph(n, p, seed=seed), n)


def test_pattern_families_are_the_graphs_with_at_most_k_edges():
    # simple graphs without isolated vertices: 1 with one edge, 2 with two, 5 with three, 11 with four
    assert [len(patterns(k, 8)) for k in (1, 2, 3, 4)] == [1, 3, 8, 19]
    assert len(patterns(4, 7)) == 18  # four disjoint edges need 8 nodes


def test_spectrum_is_invariant_under_node_relabelling(rng):
    for seed in range(3):
        a = _random_graph(7, 0.45, seed)
        x = rng.normal(size=7)
        for _ in range(3):
            p = rng.permutation(7)
            b = a[np.ix_(p, p)]
            np.testing.assert_allclose(skew_spectrum(b, 4), skew_spectrum(a, 4), atol=1e-9)
            np.testing.assert_allclose(skew_spectrum(b, 3, x[p]), skew_spectrum(a, 3, x), atol=1e-9)


def test_two_triangles_and_hexagon_differ_at_order_three_but_not_two():
    # both 2-regular on 6 nodes: the power spectrum (k=2) sees only degrees, the skew spectrum sees triangles
    hexagon, triangles = _adj(nx.cycle_graph(6)), _adj(nx.disjoint_union(nx.cycle_graph(3), nx.cycle_graph(3)))
    np.testing.assert_allclose(skew_spectrum(hexagon, 2), skew_spectrum(triangles, 2))
    assert not np.allclose(skew_spectrum(hexagon, 3), skew_spectrum(triangles, 3))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_counts_equal_enumeration_of_injective_maps(k):
    a = _random_graph(5, 0.6, 3)
    got = skew_spectrum(a, k)
    want = [injective_count_bruteforce(a, p) for p in patterns(k, 5)]
    np.testing.assert_allclose(got, want)


def test_counts_with_node_attribute_and_weights_equal_enumeration(rng):
    # weighted edges keep multiplicities (A^2 != A) and marks multiply attribute powers
    a = _random_graph(5, 0.7, 4) * rng.uniform(0.5, 2.0, size=(5, 5))
    a = np.triu(a, 1) + np.triu(a, 1).T
    x = rng.normal(size=5)
    got = skew_spectrum(a, 3, x)
    want = [injective_count_bruteforce(a, p, x) for p in patterns(3, 5, True, binary=False)]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k,kinds", [(2, None), (3, None), (3, ("A", "x", "A")), (4, None)])
def test_literal_correlation_on_s4_is_factorial_times_pattern_count(k, kinds, rng):
    a = _random_graph(4, 0.6, 2)
    x = rng.normal(size=4)
    kinds = kinds or ("A",) * k
    corr = correlation_bruteforce(a, k, kinds, x)
    perms = group_functions(a)["perms"]
    tuples = list(itertools.product(range(len(perms)), repeat=k - 1))
    if len(tuples) > 400:  # 24^3 tuples at k=4: a seeded sample keeps the test fast
        tuples = [tuples[i] for i in rng.choice(len(tuples), 400, replace=False)]
    for tup in tuples:
        p = pattern_of_tuple(perms, tup, kinds)
        assert corr[tup] == pytest.approx(math.factorial(4 - p.m) * injective_count_bruteforce(a, p, x), abs=1e-9)


@pytest.mark.parametrize("n,k", [(5, 2), (5, 3), (4, 4)])
def test_equal_literal_correlations_iff_equal_spectra(n, k):
    gs = [g for g in nx.graph_atlas_g() if g.number_of_nodes() == n]
    corr = [correlation_bruteforce(_adj(g, n), k).ravel() for g in gs]
    spec = [skew_spectrum(_adj(g, n), k) for g in gs]
    for i, j in itertools.combinations(range(len(gs)), 2):
        assert np.allclose(corr[i], corr[j]) == np.allclose(spec[i], spec[j])


@pytest.mark.parametrize("bad,what", [
    (np.array([[0.0, 1.0], [0.0, 0.0]]), "not symmetric"),
    (np.eye(3), "self-loops"),
    (np.full((3, 3), np.nan), "NaN"),
    (np.zeros((2, 3)), "shape"),
])
def test_bad_adjacency_is_a_user_error(bad, what):
    with pytest.raises(EdgesmithError, match=what):
        skew_spectrum(bad, 3)


def test_unsupported_order_and_bad_attribute_are_user_errors():
    a = _random_graph(5, 0.5, 0)
    with pytest.raises(EdgesmithError, match="order"):
        skew_spectrum(a, 9)
    with pytest.raises(EdgesmithError, match="node attribute"):
        skew_spectrum(a, 2, np.ones(4))
