"""The baseline: plain QAOA on the one-hot encoding of correlation clustering (n * k qubits).

Qubit (v, c) is 1 when node v is in cluster c (index v * k + c, qubit 0 most significant). The
phase separator is exp(-i gamma H) with the diagonal QUBO objective
    H(x) = sum_{w>0} w S_uv + sum_{w<0} |w| (1 - S_uv) - A sum_v (1 - sum_c x_vc)^2,
S_uv = sum_c x_uc x_vc, a penalty ``A`` = 1 + the largest weighted degree (so violating the one-hot
constraint never pays), the X mixer exp(-i beta sum X) and |+>^{nk} as the initial state: the
standard penalty formulation (the paper's one-hot QAOA baseline; its exact penalty is unconfirmed).

The expected cost uses the same nucleus sampling as SQAOA. The optimiser maximises the penalised
objective; the reported figure is the nucleus-expected agreement where a bitstring that is not one
clustering (some node in no or several clusters) scores 0: it yields no clustering.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.sqaoa.graphs import check_graph
from edgesmith.models.papers.sqaoa.sqaoa import nucleus, powell_maximise
from edgesmith.models.papers.sqaoa.statevector import mixer_apply

MAX_QUBITS = 20


@lru_cache(maxsize=8)
def _bits(n_qubits: int) -> np.ndarray:
    b = ((np.arange(2 ** n_qubits)[:, None] >> np.arange(n_qubits - 1, -1, -1)[None, :]) & 1).astype(np.int8)
    b.setflags(write=False)
    return b


def onehot_tables(w: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(penalised objective, agreement-or-0) for every basis state of the n * k qubits."""
    w = check_graph(w)
    n = len(w)
    if n * k > MAX_QUBITS:
        raise EdgesmithError(f"one-hot QAOA needs n * k = {n * k} qubits, more than {MAX_QUBITS} simulate here.",
                             "use fewer clusters k or a smaller graph.")
    x = _bits(n * k).reshape(-1, n, k).astype(np.float64)
    iu = np.triu_indices(n, 1)
    same = np.einsum("sac,sbc->sab", x, x)[:, iu[0], iu[1]]
    wv = w[iu]
    agree = same @ np.clip(wv, 0, None) + (1 - same) @ np.clip(-wv, 0, None)
    viol = ((1 - x.sum(axis=2)) ** 2).sum(axis=1)
    penalty = 1.0 + np.abs(w).sum(axis=1).max()
    feasible = viol == 0
    return agree - penalty * viol, np.where(feasible, agree, 0.0)


class OneHotObjective:
    """Nucleus-expected penalised objective (``__call__``) and agreement (``agreement``) of the angles."""

    def __init__(self, w: np.ndarray, k: int, p: int, t: float):
        self.w, self.k, self.p, self.t = check_graph(w), int(k), int(p), float(t)
        self.cost, self.agree = onehot_tables(self.w, self.k)
        self.n_qubits = len(self.w) * self.k
        self.n_params = 2 * self.p

    def probs(self, theta) -> np.ndarray:
        beta, gamma = np.asarray(theta[: self.p]), np.asarray(theta[self.p:])
        psi = np.full(2 ** self.n_qubits, 2.0 ** (-self.n_qubits / 2), dtype=np.complex128)
        for j in range(self.p):
            psi = psi * np.exp(-1j * gamma[j] * self.cost)
            psi = mixer_apply(psi, -beta[j])  # exp(-i beta X) = Rx(2 beta)
        return np.abs(psi) ** 2

    def _expect(self, theta, table) -> float:
        keep, pr = nucleus(self.probs(theta), self.t)
        return float(pr @ table[keep])

    def __call__(self, theta) -> float:
        return self._expect(theta, self.cost)

    def agreement(self, theta) -> float:
        return self._expect(theta, self.agree)


def solve_onehot(w: np.ndarray, k: int, p: int, t: float = 0.1, budget: int | None = None, restarts: int = 0,
                 seed: int = 0) -> tuple[float, np.ndarray]:
    """Optimise one-hot QAOA angles with Powell from small angles (+ random restarts); (agreement, angles)."""
    obj = OneHotObjective(w, k, p, t)
    budget = budget or 30 * obj.n_params
    rng = np.random.default_rng(seed)
    # the penalised energies are large, so useful gamma are small: start at 0.1 / (1 + max |H|) scale
    g0 = 0.5 / max(1.0, np.abs(obj.cost).max())
    starts = [np.concatenate([np.full(p, 0.4), np.full(p, g0)])]
    starts += [np.concatenate([rng.uniform(0, np.pi, p), rng.uniform(0, 4 * g0, p)]) for _ in range(restarts)]
    best = None
    for s in starts:
        val, x, _ = powell_maximise(obj, s, budget)
        if best is None or val > best[0]:
            best = (val, x)
    return obj.agreement(best[1]), best[1]
