"""SQAOA: the sub-problem QAOA for correlation clustering, its expected cost and its optimiser.

The recursion (ML_SQAOA.py ``sqaoa``): with at most ``k`` clusters there are ``L = k - 1`` levels.
At level l the undecided nodes (a bitmask) run the sub-problem circuit with the level's angles;
a node measured 0 joins the level's cluster, the nodes measured 1 form the next sub-problem, and
at the last level they form one more cluster together. A sub-problem with fewer than two nodes
costs nothing. The step cost of an outcome counts the pairs it settles: a positive pair both 0
(joined), a negative pair with one 0 and one 1 (split), and at the last level a positive pair both 1.
Every pair is settled exactly once on each path, so the sum over a path is the agreement.

Nucleus sampling: at each sub-problem only the most likely outcomes are kept, in order, until
their mass reaches ``t``, and renormalised. The expected agreement is the probability-weighted sum
over the tree of kept outcomes; it is computed level by level with the reach probability of each
undecided set merged across paths (the value of a sub-problem depends on its set and level only,
as the authors' lookup table assumes), which equals the recursive definition.

Choices where the authors' code has options (their paper settings unless said): ``k = n``;
per-level angles (``same_parameters=False``; ``shared=True`` uses one set for every level and is
what the exported model does, since its angles cannot depend on the level); ``use_alpha=False``
(Rh(pi/2)); ``use_const_gamma=True``; exact statevector probabilities instead of 1000 shots, so
nucleus sampling is applied to exact probabilities (their statevector mode skips it); Powell
without bounds, warm-started from angles optimised on an all-negative instance with ``gamma_c = 0``
(their ``init_point="optimal"``; we use the complete all-negative graph K_n, they use the first
ER graph of their data set, which is all-negative). Restarts: theirs repeat Powell from the same
point (different only through shot noise); ours add random starts, none by default.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.sqaoa.graphs import check_graph
from edgesmith.models.papers.sqaoa.statevector import diagonal_terms, spins, subproblem_probs


def nucleus(probs: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the most likely outcomes whose mass first reaches ``t`` (of the total), renormalised.

    Ties keep the lower index first (a stable sort), so the result is deterministic.
    """
    if not 0 < t <= 1:
        raise EdgesmithError(f"the nucleus threshold t must lie in (0, 1], got {t}.", "use e.g. t=0.1 (the paper's).")
    probs = np.clip(np.asarray(probs, dtype=np.float64).reshape(-1), 0, None)
    total = probs.sum()
    if not np.isfinite(total) or total <= 0:
        raise EdgesmithError("the outcome distribution has no positive, finite mass.",
                             "check the circuit simulation or model outputs.")
    order = _top_order(probs, t * total)
    c = np.cumsum(probs[order])
    m = min(int(np.searchsorted(c, t * total, side="left")), len(c) - 1)
    keep = order[: m + 1]
    return keep, probs[keep] / probs[keep].sum()


def _top_order(probs: np.ndarray, mass: float) -> np.ndarray:
    """A prefix of the stable descending order of ``probs`` that holds at least ``mass``.

    Large vectors (one-hot QAOA has 2^16 outcomes) first try the values at or above the 256th
    largest: all ties of that value are included and ``nonzero`` lists them in index order, so a
    stable sort of them is exactly the head of the full stable sort.
    """
    if len(probs) > 4096:
        v = np.partition(probs, len(probs) - 256)[len(probs) - 256]
        cand = np.nonzero(probs >= v)[0]
        if probs[cand].sum() >= mass:
            return cand[np.argsort(-probs[cand], kind="stable")]
    return np.argsort(-probs, kind="stable")


def mask_nodes(mask: int, n: int) -> np.ndarray:
    return np.array([i for i in range(n) if mask >> i & 1], dtype=np.int64)


@dataclass
class SubProblem:
    """Outcome-independent facts of one undecided set: its nodes, step costs and children masks."""

    nodes: np.ndarray
    cost_mid: np.ndarray  # step cost of each outcome at a level before the last
    cost_last: np.ndarray  # ... at the last level (positive pairs left both 1 are joined too)
    child: np.ndarray  # undecided mask after each outcome (the nodes measured 1)
    terms: tuple = field(default=None)  # diagonal cost terms of the circuit (cached)


def subproblem(w: np.ndarray, mask: int) -> SubProblem:
    n = len(w)
    nodes = mask_nodes(mask, n)
    q = len(nodes)
    b = (1 - spins(q)) / 2  # bit per qubit (1 = undecided next)
    s = 1 - b  # 1 = joins this level's cluster
    ws = w[np.ix_(nodes, nodes)]
    wp, wn = np.clip(ws, 0, None), np.clip(-ws, 0, None)
    joined = 0.5 * ((s @ wp) * s).sum(axis=1)
    split = ((s @ wn) * b).sum(axis=1)  # W is symmetric: the s-b and b-s halves are equal
    both_one = 0.5 * ((b @ wp) * b).sum(axis=1)
    child = (b.astype(np.int64) << nodes[None, :]).sum(axis=1)
    return SubProblem(nodes, joined + split, joined + split + both_one, child, diagonal_terms(w, nodes))


def tree_expectation(ws: list[np.ndarray], levels: int, t: float, dist_fn) -> np.ndarray:
    """Nucleus-expected agreement of each graph, expanding every tree level by level.

    ``dist_fn(requests)`` gets a list of ``(graph_index, mask, level)`` and returns one outcome
    distribution per request (over 2^q outcomes of that sub-problem, qubit 0 = lowest node index
    as the most significant bit), so a batched model can answer a whole level at once.
    """
    out = np.zeros(len(ws))
    if levels == 0:  # one cluster: every positive pair agrees
        return np.array([np.triu(np.clip(w, 0, None), 1).sum() for w in ws])
    frontier = [{(1 << len(w)) - 1: 1.0} for w in ws]
    subs = [dict() for _ in ws]
    for level in range(levels):
        last = level == levels - 1
        reqs = [(g, m) for g, fr in enumerate(frontier) for m in fr if bin(m).count("1") >= 2]
        if not reqs:
            break
        dists = dist_fn([(g, m, level) for g, m in reqs])
        new = [defaultdict(float) for _ in ws]
        for (g, m), probs in zip(reqs, dists):
            sp = subs[g].get(m) or subs[g].setdefault(m, subproblem(ws[g], m))
            keep, pr = nucleus(probs, t)
            reach = frontier[g][m]
            out[g] += reach * float(pr @ (sp.cost_last if last else sp.cost_mid)[keep])
            if not last:
                for o, po in zip(keep, pr):
                    new[g][int(sp.child[o])] += reach * po
        frontier = new
    return out


def decode_modes(ws: list[np.ndarray], levels: int, dist_fn) -> list[np.ndarray]:
    """The clustering of each graph's most likely path (t -> 0): the argmax outcome at every level.

    ``dist_fn`` is batched like ``tree_expectation``'s. Nodes measured 0 at level l get label l;
    the rest (the last level's 1s, or a single leftover node) form one more cluster.
    """
    labels = [np.full(len(w), levels) for w in ws]
    masks = [(1 << len(w)) - 1 for w in ws]
    for level in range(levels):
        live = [g for g, m in enumerate(masks) if bin(m).count("1") >= 2]
        if not live:
            break
        dists = dist_fn([(g, masks[g], level) for g in live])
        for g, probs in zip(live, dists):
            nodes = mask_nodes(masks[g], len(ws[g]))
            o = int(np.argmax(np.asarray(probs)))
            bits = (o >> np.arange(len(nodes) - 1, -1, -1)) & 1
            labels[g][nodes[bits == 0]] = level
            masks[g] = int((bits.astype(np.int64) << nodes).sum())
    return labels


class SqaoaObjective:
    """Nucleus-expected agreement of one graph as a function of the flat angle vector.

    The vector holds ``[beta (L'p), gamma (L'p), gamma_c (L'p)]`` with ``L' = L`` per-level angles
    or ``L' = 1`` when ``shared`` (the authors' order). Sub-problem distributions are cached per
    (angles of its level, undecided set), so a Powell step that moves one level's angles only
    re-simulates that level's sub-problems (the authors cache the same way).
    """

    def __init__(self, w: np.ndarray, p: int, t: float, k: int | None = None, shared: bool = False):
        self.w = check_graph(w)
        n = len(self.w)
        self.k = n if k is None else int(k)
        if not 1 <= self.k <= n or p < 1:
            raise EdgesmithError(f"need 1 <= k <= n and p >= 1, got k={self.k}, n={n}, p={p}.",
                                 "use k between 1 and the number of nodes and depth p >= 1.")
        self.p, self.t, self.shared = int(p), float(t), bool(shared)
        self.levels = self.k - 1
        self.n_sets = 1 if shared else max(self.levels, 1)
        self.n_params = 3 * self.p * self.n_sets
        self._subs: dict[int, SubProblem] = {}
        self._cache: dict = {}
        self.n_evals = 0

    def level_params(self, theta: np.ndarray, level: int) -> np.ndarray:
        th = np.asarray(theta, dtype=np.float64).reshape(3, self.n_sets, self.p)
        return th[:, 0 if self.shared else level, :].reshape(-1)

    def probs(self, mask: int, level: int, theta) -> np.ndarray:
        lp = self.level_params(theta, level)
        key = (lp.tobytes(), mask)
        hit = self._cache.get(key)
        if hit is None:
            sp = self._subs.get(mask) or self._subs.setdefault(mask, subproblem(self.w, mask))
            hit = subproblem_probs(self.w, sp.nodes, lp, self.p, terms=sp.terms)
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def __call__(self, theta) -> float:
        self.n_evals += 1
        return float(tree_expectation([self.w], self.levels, self.t,
                                      lambda reqs: [self.probs(m, lv, theta) for _, m, lv in reqs])[0])

    def decode(self, theta) -> np.ndarray:
        return decode_modes([self.w], self.levels, lambda reqs: [self.probs(m, lv, theta) for _, m, lv in reqs])[0]


def powell_maximise(f, x0: np.ndarray, budget: int) -> tuple[float, np.ndarray, int]:
    """Maximise ``f`` with scipy's Powell (derivative-free: the nucleus makes ``f`` piecewise constant)."""
    res = minimize(lambda x: -f(x), np.asarray(x0, dtype=np.float64), method="Powell",
                   options={"maxfev": int(budget), "xtol": 1e-3, "ftol": 1e-7})
    return -float(res.fun), np.asarray(res.x), int(res.nfev)


def warm_start(n: int, p: int, t: float, budget: int, k: int | None = None, shared: bool = False) -> np.ndarray:
    """Angles optimised on the complete all-negative graph K_n with gamma_c held at 0, gamma_c appended as 0."""
    w = -(np.ones((n, n)) - np.eye(n))
    obj = SqaoaObjective(w, p, t, k=k, shared=shared)
    m = 2 * p * obj.n_sets
    x0 = np.concatenate([np.full(m // 2, 0.3), np.full(m // 2, 0.6)])  # small (beta, gamma), a common QAOA start
    _, x, _ = powell_maximise(lambda v: obj(np.concatenate([v, np.zeros(p * obj.n_sets)])), x0, budget)
    return np.concatenate([x, np.zeros(p * obj.n_sets)])


@dataclass
class SqaoaResult:
    expected_agreement: float
    theta: np.ndarray
    n_evals: int
    labels: np.ndarray  # the most likely path's clustering


def solve(w: np.ndarray, p: int, t: float = 0.1, budget: int = 600, restarts: int = 0, seed: int = 0,
          x0: np.ndarray | None = None, k: int | None = None, shared: bool = False) -> SqaoaResult:
    """Optimise the angles of one graph (Powell from ``x0`` or the K_n warm start, plus random restarts)."""
    obj = SqaoaObjective(w, p, t, k=k, shared=shared)
    if x0 is None:
        x0 = warm_start(len(obj.w), p, t, budget, k=k, shared=shared)
    rng = np.random.default_rng(seed)
    starts = [np.asarray(x0, dtype=np.float64)] + [rng.uniform(0, 2 * np.pi, obj.n_params) for _ in range(restarts)]
    best = None
    for s in starts:
        val, x, _ = powell_maximise(obj, s, budget)
        if best is None or val > best[0]:
            best = (val, x)
    return SqaoaResult(best[0], best[1], obj.n_evals, obj.decode(best[1]))
