"""The generalised skew spectrum of graphs as invariant counts, plus brute-force definitions to check it.

``skew_spectrum(adj, k)`` returns, for every pattern P of ``models.papers.skew.patterns.patterns(k, n)``,
the injective count inj(P, G): the k-correlation of the graph's function on S_n takes exactly the
values (n - m_P)! inj(P, G), and the (generalised) skew spectrum is an invertible Fourier transform of
that correlation, so two graphs have the same k-th spectrum iff these vectors are equal. The counts
are computed as homomorphism counts (one ``einsum`` per quotient pattern: sums of products of
adjacency entries, i.e. matrix products, O(n^3) per pattern for these tree-width <= 2 patterns) and a
Moebius inversion over vertex partitions. With ``x`` (a node attribute: an orbit function on the
nodes) the patterns also carry node marks, the orbit-function generalisation of the paper.

Two brute-force references (small n only) pin this down in the tests:
``injective_count_bruteforce`` sums over injective maps, and ``correlation_bruteforce`` evaluates the
k-correlation on S_n literally, from its definition.
"""
from __future__ import annotations

import itertools
import math
import string
from functools import lru_cache

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.skew.patterns import Pattern, mobius_terms, patterns


def check_adjacency(adj: np.ndarray, what: str = "adjacency") -> np.ndarray:
    """Float64 (batch, n, n) from (n, n) or (batch, n, n); symmetric, finite, zero diagonal."""
    a = np.asarray(adj, dtype=np.float64)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3 or a.shape[1] != a.shape[2] or a.shape[1] < 2:
        raise EdgesmithError(f"{what} has shape {np.shape(adj)}, not (n, n) or (batch, n, n) with n >= 2.",
                             "pass square adjacency matrices of graphs with at least 2 nodes.")
    if not np.all(np.isfinite(a)):
        raise EdgesmithError(f"{what} contains NaN or infinite values.", "pass finite edge weights.")
    if not np.allclose(a, np.swapaxes(a, 1, 2)):
        raise EdgesmithError(f"{what} is not symmetric.", "pass undirected graphs (A equal to its transpose).")
    if np.any(np.abs(np.diagonal(a, axis1=1, axis2=2)) > 0):
        raise EdgesmithError(f"{what} has self-loops (a non-zero diagonal).", "remove self-loops: set A[i, i] = 0.")
    return a


def _is_binary(a: np.ndarray) -> bool:
    return bool(np.all((a == 0) | (a == 1)))


def hom_einsum(p: Pattern) -> tuple[str, list[tuple[str, int, int | None]]]:
    """The einsum of hom(p, G) over a batch: subscripts and operand recipe (kind, power, vertex).

    Vertex v of the pattern is letter ``letters[v]``; the batch index is ``z``. Each edge contributes
    A**mult with two vertex letters, each marked vertex x**mark with one.
    """
    letters = string.ascii_lowercase[: p.m]
    subs, ops = [], []
    for u, v, c in p.edges:
        subs.append("z" + letters[u] + letters[v])
        ops.append(("A", c, None))
    for v, c in enumerate(p.marks):
        if c:
            subs.append("z" + letters[v])
            ops.append(("x", c, v))
    return ",".join(subs) + "->z", ops


def hom_counts(a: np.ndarray, p: Pattern, x: np.ndarray | None = None) -> np.ndarray:
    """hom(p, G) for each graph of the batch ``a`` (float64, (batch, n, n)); ``x``: (batch, n) or None."""
    spec, ops = hom_einsum(p)
    operands = []
    for kind, c, _ in ops:
        if kind == "A":
            operands.append(a if c == 1 else a**c)
        else:
            operands.append(x if c == 1 else x**c)
    return np.einsum(spec, *operands, optimize="greedy")


def injective_counts(a: np.ndarray, p: Pattern, x: np.ndarray | None = None, binary: bool = True) -> np.ndarray:
    """inj(p, G) per graph: Moebius inversion of the homomorphism counts of p's quotients."""
    total = np.zeros(a.shape[0], dtype=np.float64)
    for coef, q in mobius_terms(p, binary):
        total += coef * hom_counts(a, q, x)
    return total


def skew_spectrum(adj: np.ndarray, k: int, x: np.ndarray | None = None) -> np.ndarray:
    """The order-k generalised skew spectrum as invariant counts, shape (batch, n_patterns) (or
    (n_patterns,) for one graph). Columns follow ``spectrum_patterns(k, n, x is not None, binary)``."""
    single = np.ndim(adj) == 2
    a = check_adjacency(adj)
    xs = None
    if x is not None:
        xs = np.asarray(x, dtype=np.float64)
        xs = xs[None] if xs.ndim == 1 else xs
        if xs.shape != a.shape[:2] or not np.all(np.isfinite(xs)):
            raise EdgesmithError(f"node attribute has shape {np.shape(x)} (or non-finite values) but the graphs "
                                 f"have shape {a.shape[1:]}.", "pass one finite value per node: shape (n,) or (batch, n).")
    binary = _is_binary(a)
    pats = patterns(k, a.shape[1], xs is not None, binary)
    out = np.stack([injective_counts(a, p, xs, binary) for p in pats], axis=1)
    return out[0] if single else out


def spectrum_patterns(k: int, n: int, node_attribute: bool = False, binary: bool = True) -> tuple[Pattern, ...]:
    """The patterns naming the columns of ``skew_spectrum`` for n-node graphs."""
    return patterns(k, n, node_attribute, binary)


def correlation_scale(p: Pattern, n: int) -> int:
    """(n - m)!: how many permutations of S_n realise one injective map of the pattern's m positions."""
    return math.factorial(n - p.m)


# --- brute-force references (small n) ------------------------------------------------------------


def injective_count_bruteforce(adj: np.ndarray, p: Pattern, x: np.ndarray | None = None) -> float:
    """inj(p, G) by enumerating the injective maps of the pattern's vertices into the graph's nodes."""
    a = np.asarray(adj, dtype=np.float64)
    total = 0.0
    for phi in itertools.permutations(range(a.shape[0]), p.m):
        term = 1.0
        for u, v, c in p.edges:
            term *= a[phi[u], phi[v]] ** c
        for v, c in enumerate(p.marks):
            if c:
                term *= x[phi[v]] ** c
        total += term
    return total


def group_functions(adj: np.ndarray, x: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The graph's functions on S_n, tabulated over all n! permutations (rows of ``perms``).

    f_A(s) = A[s(n-1), s(n-2)] and, with an attribute, f_x(s) = x[s(n-1)].
    """
    a = np.asarray(adj, dtype=np.float64)
    n = a.shape[0]
    perms = _perm_tables(n)[0]
    fs = {"A": a[perms[:, n - 1], perms[:, n - 2]]}
    if x is not None:
        fs["x"] = np.asarray(x, dtype=np.float64)[perms[:, n - 1]]
    return {"perms": perms, **fs}


@lru_cache(maxsize=4)
def _perm_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All permutations of S_n (rows, lexicographic) and their composition table:
    compose[s, t] = row index of s o t (t applied first), (s t)(j) = s(t(j))."""
    perms = np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    index = {tuple(p): i for i, p in enumerate(perms)}
    compose = np.array([[index[tuple(s[t])] for t in perms] for s in perms], dtype=np.int64)
    perms.setflags(write=False)
    compose.setflags(write=False)
    return perms, compose


def correlation_bruteforce(adj: np.ndarray, k: int, kinds: tuple[str, ...] | None = None,
                           x: np.ndarray | None = None) -> np.ndarray:
    """The k-correlation a(s_1..s_{k-1}) = sum_s prod_i f_{kinds[i]}(s s_i), s_0 = identity, from its
    definition: a tensor of shape (n!,) * (k-1) indexed by the rows of ``group_functions(...)["perms"]``.

    Only for tiny n: it tabulates f(s t) for all pairs of permutations.
    """
    kinds = kinds or ("A",) * k
    if len(kinds) != k:
        raise EdgesmithError(f"{len(kinds)} function kinds given for a {k}-correlation.", "give one kind per factor.")
    tab = group_functions(adj, x)
    compose = _perm_tables(np.shape(adj)[0])[1]
    shifted = [tab[kd][compose] for kd in kinds[1:]]  # shifted[i][s, t] = f(s t)
    letters = string.ascii_lowercase[: k - 1]
    spec = "s," + ",".join("s" + c for c in letters) + "->" + letters
    return np.einsum(spec, tab[kinds[0]], *shifted, optimize="greedy")


def pattern_of_tuple(perms: np.ndarray, tup, kinds: tuple[str, ...], binary: bool = True) -> Pattern:
    """The canonical pattern formed by factors f_{kinds[i]}(s s_i), s_0 = identity, s_i = perms[tup[i-1]]."""
    from edgesmith.models.papers.skew.patterns import _canonical

    n = perms.shape[1]
    ident = np.arange(n)
    sigmas = [ident] + [perms[t] for t in tup]
    label: dict[int, int] = {}
    edges: dict[tuple[int, int], int] = {}
    mark_pos: list[int] = []

    def lab(pos: int) -> int:
        return label.setdefault(int(pos), len(label))

    for kind, s in zip(kinds, sigmas):
        if kind == "A":
            u, v = lab(s[n - 1]), lab(s[n - 2])
            key = (min(u, v), max(u, v))
            edges[key] = 1 if binary else edges.get(key, 0) + 1
        else:
            mark_pos.append(lab(s[n - 1]))
    marks = [0] * len(label)
    for v in mark_pos:
        marks[v] += 1
    return _canonical(len(label), edges, marks)
