"""A small complex128 statevector simulator and the SQAOA sub-problem circuit.

Conventions follow cirq (what the authors' code runs on): qubit 0 is the most significant bit of a
basis-state index, ``Rz(t) = exp(-i t Z / 2)``, ``Rx(t) = exp(-i t X / 2)``, and the SQAOA
"transition" gate ``Rh(a) = cos(a) I - i sin(a) (X + Z) / sqrt(2)`` (``Rh(pi/2) = -i H``).

The sub-problem circuit on the undecided nodes ``nodes`` (sorted, original indices), per layer j:
    Rz(2 * nodes[q] * gamma_c[j]) on every qubit q          (a field weighted by the node's index)
    CNOT(q, r) Rz_r(-2 * W[nodes[q], nodes[r]] * gamma[j]) CNOT(q, r) for every edge
    Rx(-2 * beta[j]) on every qubit                          (the mixer)
after one Rh(pi/2) per qubit. The field uses the node's ORIGINAL index, exactly as ``U_c`` in the
authors' ML_SQAOA.py (``Rz(rads=2 * i_map * const_gamma)``); it breaks the symmetry between nodes
and between a bitstring and its complement, which the ZZ terms alone cannot.

``gate_level_probs`` applies these gates one by one (the reference); ``subproblem_probs`` computes
the same state fast: every cost gate is diagonal, so a layer's cost part is one phase vector
``exp(i (gamma * sum_{q<r} W z_q z_r - gamma_c * sum_q nodes[q] z_q))`` with ``z = 1 - 2 b``.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

SQRT_HALF = np.sqrt(0.5)
DENSE_MIXER_MAX_QUBITS = 10


def rz(theta: float) -> np.ndarray:
    return np.diag([np.exp(-0.5j * theta), np.exp(0.5j * theta)])


def rx(theta: float) -> np.ndarray:
    c, s = np.cos(theta / 2), np.sin(theta / 2)
    return np.array([[c, -1j * s], [-1j * s, c]])


def rh(alpha: float) -> np.ndarray:
    c, s = np.cos(alpha), SQRT_HALF * np.sin(alpha)
    return np.array([[c - 1j * s, -1j * s], [-1j * s, c + 1j * s]])


def zero_state(n_qubits: int) -> np.ndarray:
    psi = np.zeros((2,) * n_qubits, dtype=np.complex128)
    psi[(0,) * n_qubits] = 1.0
    return psi


def apply_1q(psi: np.ndarray, gate: np.ndarray, q: int) -> np.ndarray:
    """Apply a 2x2 unitary to qubit ``q`` of a state shaped (2,) * n."""
    return np.moveaxis(np.tensordot(gate, psi, axes=([1], [q])), 0, q)


def apply_cnot(psi: np.ndarray, control: int, target: int) -> np.ndarray:
    psi = psi.copy()
    idx1 = [slice(None)] * psi.ndim
    idx1[control] = 1
    sub = psi[tuple(idx1)]
    t = target - (target > control)  # the target's axis index once the control axis is sliced away
    psi[tuple(idx1)] = np.flip(sub, axis=t)
    return psi


def probabilities(psi: np.ndarray) -> np.ndarray:
    """|amplitude|^2 as a flat vector, index = bitstring with qubit 0 most significant."""
    return np.abs(psi.reshape(-1)) ** 2


def split_params(theta, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(beta, gamma, gamma_c), each of length p, from one flat vector of 3p angles (the code's order)."""
    theta = np.asarray(theta, dtype=np.float64)
    return theta[:p], theta[p:2 * p], theta[2 * p:3 * p]


def gate_level_probs(w: np.ndarray, nodes, theta, p: int) -> np.ndarray:
    """Outcome distribution of the sub-problem circuit, simulated gate by gate (the reference)."""
    nodes = list(nodes)
    q = len(nodes)
    beta, gamma, gamma_c = split_params(theta, p)
    psi = zero_state(q)
    for i in range(q):
        psi = apply_1q(psi, rh(np.pi / 2), i)
    for j in range(p):
        for i in range(q):
            psi = apply_1q(psi, rz(2 * nodes[i] * gamma_c[j]), i)
        for a in range(q):
            for b in range(a + 1, q):
                wab = w[nodes[a], nodes[b]]
                if wab != 0:
                    psi = apply_cnot(psi, a, b)
                    psi = apply_1q(psi, rz(-2 * wab * gamma[j]), b)
                    psi = apply_cnot(psi, a, b)
        for i in range(q):
            psi = apply_1q(psi, rx(-2 * beta[j]), i)
    return probabilities(psi)


@lru_cache(maxsize=32)
def spins(q: int) -> np.ndarray:
    """(2^q, q) array of z = 1 - 2 b for every basis state (qubit 0 = most significant bit)."""
    b = (np.arange(2 ** q)[:, None] >> np.arange(q - 1, -1, -1)[None, :]) & 1
    z = (1 - 2 * b).astype(np.float64)
    z.setflags(write=False)
    return z


def diagonal_terms(w: np.ndarray, nodes) -> tuple[np.ndarray, np.ndarray]:
    """(sum_{q<r} W z_q z_r, sum_q nodes[q] z_q) per basis state: the two diagonal cost terms."""
    nodes = np.asarray(nodes)
    z = spins(len(nodes))
    ws = w[np.ix_(nodes, nodes)]
    zz = 0.5 * ((z @ ws) * z).sum(axis=1)  # W has a zero diagonal, so this is the sum over q<r
    field = z @ nodes.astype(np.float64)
    return zz, field


@lru_cache(maxsize=32)
def hadamard_matrix(q: int) -> np.ndarray:
    """H^{(x)q} / sqrt(2^q) as a dense real matrix (it is its own inverse)."""
    h = np.ones((1, 1))
    for _ in range(q):
        h = np.block([[h, h], [h, -h]])
    h = h / np.sqrt(2.0 ** q)
    h.setflags(write=False)
    return h


def mixer_apply(psi: np.ndarray, beta: float) -> np.ndarray:
    """Rx(-2 beta) = exp(i beta X) on every qubit of a flat state.

    X^{(x)q} is diagonal after a Hadamard on every qubit (H X H = Z), so the mixer is
    H^q diag(exp(i beta sum_q z_q)) H^q: two real matrix products instead of q tensor contractions.
    """
    q = int(np.log2(psi.size))
    if q > DENSE_MIXER_MAX_QUBITS:  # the dense H^q would not fit: apply Rx^{(x)4} to 4 qubits at a time
        out = psi
        for i in range(0, q, 4):
            g = min(4, q - i)
            m = mixer_matrix(g, beta)
            v = out.reshape(2 ** i, 2 ** g, -1)
            if v.shape[0] < v.shape[2]:
                out = np.matmul(m, v).reshape(-1)
            else:
                out = (v.transpose(0, 2, 1) @ m.T).transpose(0, 2, 1).reshape(-1)
        return out
    h = hadamard_matrix(q)
    v = np.exp(1j * beta * _zsum(q)) * _real_matmul(h, psi)
    return _real_matmul(h, v)


def _real_matmul(h: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """``h @ psi`` for real ``h`` without numpy upcasting ``h`` to a complex copy on every call."""
    return (h @ psi.real) + 1j * (h @ psi.imag)


@lru_cache(maxsize=32)
def _zsum(q: int) -> np.ndarray:
    return spins(q).sum(axis=1)


def subproblem_probs(w: np.ndarray, nodes, theta, p: int, terms=None) -> np.ndarray:
    """Outcome distribution of the sub-problem circuit on ``nodes`` (same as ``gate_level_probs``)."""
    q = len(nodes)
    beta, gamma, gamma_c = split_params(theta, p)
    zz, field = terms if terms is not None else diagonal_terms(w, nodes)
    psi = np.full(2 ** q, (-1j) ** q * 2.0 ** (-q / 2), dtype=np.complex128)  # Rh(pi/2)^q |0>
    for j in range(p):
        psi = psi * np.exp(1j * (gamma[j] * zz - gamma_c[j] * field))
        psi = mixer_apply(psi, beta[j])
    return np.abs(psi) ** 2


def mixer_matrix(n: int, beta: float) -> np.ndarray:
    """The full 2^n x 2^n mixer unitary (Kronecker power of Rx(-2 beta)); used by the exported module."""
    m = np.array([[1.0 + 0j]])
    one = rx(-2 * beta)
    for _ in range(n):
        m = np.kron(m, one)
    return m
