"""The exportable SQAOA circuit: a torch module from packed signed graphs to outcome distributions.

Input: ``(batch, n(n-1)/2)`` upper-triangle edge weights (``graphs.pack``). Output: ``(batch, 2^n)``
probabilities of the n-qubit SQAOA circuit with fixed angles (one set shared by every level).
A sub-problem is run by zeroing the edges that touch decided nodes and summing the output over
the decided qubits: those qubits then carry no edge, stay in a product state with the rest, and
the marginal over the undecided qubits equals the sub-problem circuit on them alone (the field
term uses the node's original index either way).

The complex state is two real tensors (re, im); the diagonal cost layer is a phase
``gamma * (x @ ZZ) - gamma_c * field`` applied as a complex multiply by (cos, sin), and the mixer
``Rx(-2 beta)^{(x)n}`` is one real ``(2 * 2^n, 2 * 2^n)`` matrix on [re, im]: MatMul, Cos, Sin,
Mul, Add and Slice only, which export to ONNX and quantize.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edgesmith.models.papers.sqaoa.statevector import mixer_matrix, spins, split_params


def zz_matrix(n: int) -> np.ndarray:
    """(n(n-1)/2, 2^n): z_i z_j of each packed pair (i < j, row-major) for every basis state."""
    z = spins(n)
    iu = np.triu_indices(n, 1)
    return (z[:, iu[0]] * z[:, iu[1]]).T.copy()


class SqaoaCircuit(nn.Module):
    """The SQAOA sub-problem circuit on n qubits with fixed angles ``theta = [beta, gamma, gamma_c]`` (3p)."""

    def __init__(self, n: int, p: int, theta):
        super().__init__()
        self.n, self.p = int(n), int(p)
        beta, gamma, gamma_c = split_params(theta, p)
        dim = 2 ** n
        f32 = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
        self.register_buffer("zz", f32(zz_matrix(n)))
        self.register_buffer("field", f32(spins(n) @ np.arange(n, dtype=np.float64)))
        amp = (-1j) ** n * 2.0 ** (-n / 2)  # Rh(pi/2)^{(x)n} |0...0>
        self.register_buffer("init_re", f32(np.full(dim, amp.real)))
        self.register_buffer("init_im", f32(np.full(dim, amp.imag)))
        self.register_buffer("theta", torch.tensor(np.asarray(theta, dtype=np.float64)))
        mixers = []
        for j in range(p):
            m = mixer_matrix(n, beta[j])
            a, b = m.real.T, m.imag.T
            mixers.append(np.block([[a, b], [-b, a]]))  # [re, im] @ this = [re', im'] of m @ psi
        self.register_buffer("mixers", f32(np.stack(mixers)))
        self.register_buffer("gamma", f32(gamma))
        self.register_buffer("gamma_c", f32(gamma_c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.matmul(x, self.zz)
        dim = e.shape[-1]
        re = e * 0 + self.init_re
        im = e * 0 + self.init_im
        for j in range(self.p):
            phase = self.gamma[j] * e - self.gamma_c[j] * self.field
            c, s = torch.cos(phase), torch.sin(phase)
            re, im = re * c - im * s, re * s + im * c
            st = torch.matmul(torch.cat([re, im], dim=-1), self.mixers[j])
            re, im = st[:, :dim], st[:, dim:]
        return re * re + im * im


def marginal(probs: np.ndarray, n: int, nodes) -> np.ndarray:
    """Sum an n-qubit outcome distribution over every qubit not in ``nodes`` (kept in ascending order)."""
    nodes = sorted(int(v) for v in nodes)
    drop = tuple(i for i in range(n) if i not in nodes)
    return np.asarray(probs, dtype=np.float64).reshape((2,) * n).sum(axis=drop).reshape(-1)
