"""Overlap patterns of k factors: what each value of a graph's k-correlation on S_n counts.

A graph on nodes 0..n-1 is the function f(s) = A[s(n-1), s(n-2)] on the symmetric group S_n (the
last two positions of a permutation pick an ordered node pair); a node attribute x is the orbit
function f_x(s) = x[s(n-1)]. The k-correlation of such functions is

    a(s_1, ..., s_{k-1}) = sum_{s in S_n} prod_{i=0}^{k-1} f_{c_i}(s s_i),    s_0 = identity,

and the generalised skew spectrum is its Fourier transform in the last argument (q(lambda) =
r^dagger(lambda) f(lambda) for k = 3), an invertible linear map of it. Every factor f(s s_i) reads
``s`` at the positions s_i(n-1), s_i(n-2) (an edge factor) or s_i(n-1) (a node factor). Relabel the
m distinct positions the k factors touch as 0..m-1: they form a *pattern* P (edges with
multiplicities, node marks with multiplicities), and the sum over s is

    a = (n - m)! * inj(P, G),  inj(P, G) = sum_{phi: V(P) -> V(G) injective}
                                        prod_{(u,v) in E(P)} A[phi u, phi v]^mult * prod_u x[phi u]^mark(u).

So the correlation, as a function, holds exactly the numbers inj(P, G) for the patterns P that k
factors can form (each P arises for some tuple of permutations as long as m <= n). This module
enumerates those patterns, up to isomorphism; ``models.papers.skew.spectrum`` counts them.

For binary adjacency (A^2 = A) the edge multiplicities collapse: patterns are the simple graphs with
1..k edges and no isolated vertex (k = 2: an edge, a 2-path, two disjoint edges; k = 3 adds the
triangle, 3-path, 3-star, 2-path + edge, three disjoint edges; k = 4 adds the 11 graphs with four
edges). With a node attribute the patterns also carry marks (a factor f_x on a vertex), and every
vertex is touched by an edge or a mark.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

from edgesmith.common import EdgesmithError


@dataclass(frozen=True)
class Pattern:
    """A canonical overlap pattern on vertices 0..m-1.

    ``edges``: sorted (u, v, multiplicity) with u < v; ``marks``: per-vertex multiplicity of the node
    attribute factor (all zero without attributes).
    """

    m: int
    edges: tuple[tuple[int, int, int], ...]
    marks: tuple[int, ...]

    @property
    def n_factors(self) -> int:
        return sum(e[2] for e in self.edges) + sum(self.marks)

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    def name(self) -> str:
        """A short readable name, e.g. ``m3:01,12`` (a 2-path) or ``m2:01|x1,0``."""
        es = ",".join(f"{u}{v}" + (f"^{k}" if k > 1 else "") for u, v, k in self.edges)
        mk = "" if not any(self.marks) else "|x" + ",".join(map(str, self.marks))
        return f"m{self.m}:{es}{mk}"


def _canonical(m: int, edges: dict[tuple[int, int], int], marks: list[int]) -> Pattern:
    """The lexicographically smallest relabelling, searched only over vertex orders that keep a
    per-vertex signature sorted (a cheap refinement that keeps this exact and fast for m <= 8)."""
    deg = [0] * m
    for (u, v), k in edges.items():
        deg[u] += k
        deg[v] += k
    sig = [(-deg[i], -marks[i]) for i in range(m)]
    groups: dict[tuple, list[int]] = {}
    for i in range(m):
        groups.setdefault(sig[i], []).append(i)
    ordered = [groups[s] for s in sorted(groups)]
    best = None
    for parts in itertools.product(*(itertools.permutations(g) for g in ordered)):
        order = [v for part in parts for v in part]  # order[new] = old
        new_of = {old: new for new, old in enumerate(order)}
        es = tuple(sorted((min(new_of[u], new_of[v]), max(new_of[u], new_of[v]), k) for (u, v), k in edges.items()))
        mk = tuple(marks[old] for old in order)
        key = (es, mk)
        if best is None or key < best:
            best = key
    return Pattern(m, best[0], best[1])


@lru_cache(maxsize=None)
def patterns(k: int, max_vertices: int, node_attribute: bool = False, binary: bool = True) -> tuple[Pattern, ...]:
    """All patterns of the k-correlation on graphs with ``max_vertices`` nodes (m <= max_vertices).

    Without a node attribute: every factor is an edge factor (the skew spectrum family of Kondor and
    Borgwardt, k = 3, and its k-correlation generalisation). With one: each of the k factors is an edge
    or a node factor (the orbit-function generalisation), so patterns with fewer edges carry marks.
    ``binary``: the adjacency is 0/1, so repeated edges collapse (A^2 = A); marks never collapse
    because attributes are real-valued. Sorted by (number of factors, vertices, edges) for a stable order.
    """
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 6:
        raise EdgesmithError(f"correlation order k={k!r} is not supported.", "use an order k between 1 and 6 (2, 3 or 4 in practice).")
    if not isinstance(max_vertices, int) or max_vertices < 1:
        raise EdgesmithError(f"max_vertices={max_vertices!r} is not a positive number of nodes.", "pass the graphs' node count.")
    found: set[Pattern] = set()
    # grow configurations factor by factor; a new factor may touch existing positions or new ones
    frontier = {(0, (), ())}
    for _ in range(k):
        nxt = set()
        for m, edges_t, marks_t in frontier:
            edges, marks = dict(((u, v), c) for u, v, c in edges_t), list(marks_t)
            for new_m, e_add, x_add in _extensions(m, node_attribute):
                if new_m > max_vertices:
                    continue
                e2 = dict(edges)
                mk = marks + [0] * (new_m - m)
                if e_add is not None:
                    e2[e_add] = 1 if binary else e2.get(e_add, 0) + 1
                if x_add is not None:
                    mk[x_add] += 1
                p = _canonical(new_m, e2, mk)
                nxt.add((p.m, p.edges, p.marks))
        frontier = nxt
        for m, e, mk in frontier:
            if e:  # a correlation always has its first factor; an edge-free pattern is kept only with attributes
                found.add(Pattern(m, e, mk))
            elif node_attribute:
                found.add(Pattern(m, e, mk))
    return tuple(sorted(found, key=lambda p: (p.n_factors, p.m, p.n_edges, p.edges, p.marks)))


def _extensions(m: int, node_attribute: bool):
    """(new vertex count, edge to add or None, mark vertex or None) for one more factor.

    New positions are numbered in order of first use, so an edge joins two old vertices, an old vertex
    and vertex m, or the two new vertices m and m+1; a mark sits on an old vertex or on vertex m.
    """
    for u in range(m):
        for v in range(u + 1, m):
            yield m, (u, v), None
        yield m + 1, (u, m), None
    yield m + 2, (m, m + 1), None
    if node_attribute:
        for u in range(m):
            yield m, None, u
        yield m + 1, None, m


def set_partitions(items: list[int]):
    """All partitions of ``items`` into non-empty blocks (Bell-number many; m <= 8 here)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [[first]] + part
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]


@lru_cache(maxsize=None)
def mobius_terms(p: Pattern, binary: bool = True) -> tuple[tuple[int, Pattern], ...]:
    """inj(P, G) = sum_i coef_i * hom(Q_i, G): Moebius inversion over the partitions of V(P).

    hom counts maps that may merge vertices; inj keeps only injective ones. The coefficient of the
    quotient by a partition is prod over blocks of (-1)^(|B|-1) (|B|-1)!. A quotient that merges the two
    ends of an edge needs a self-loop, zero on graphs without self-loops, so it is dropped. Quotients
    are returned un-canonicalised (vertex ids are block ids) with merged multiplicities.
    """
    terms: dict[Pattern, int] = {}
    for part in set_partitions(list(range(p.m))):
        block = {v: b for b, blk in enumerate(part) for v in blk}
        edges: dict[tuple[int, int], int] = {}
        loop = False
        for u, v, c in p.edges:
            a, b = block[u], block[v]
            if a == b:
                loop = True
                break
            key = (min(a, b), max(a, b))
            edges[key] = 1 if binary else edges.get(key, 0) + c
        if loop:
            continue
        marks = [0] * len(part)
        for v, c in enumerate(p.marks):
            marks[block[v]] += c
        coef = 1
        for blk in part:
            s = len(blk) - 1
            coef *= (-1) ** s * _factorial(s)
        q = Pattern(len(part), tuple(sorted((u, v, c) for (u, v), c in edges.items())), tuple(marks))
        terms[q] = terms.get(q, 0) + coef
    return tuple((c, q) for q, c in terms.items() if c != 0)


def _factorial(s: int) -> int:
    out = 1
    for i in range(2, s + 1):
        out *= i
    return out
