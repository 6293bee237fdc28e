"""The critic: program tokens + visible-test results -> a distribution over critiques (location, fix type).

Input encoding (``FEATURES`` float32 values per state): for each of ``L_MAX`` step slots, one-hot
operator (4), one-hot constant (16) and an "empty slot" flag; for each of the ``VISIBLE`` tests,
one-hot input, current output, expected output and their difference modulo P (the failing-test
signature). The network is an MLP whose ``L_MAX * 4`` logits index the joint critique
``loc * 4 + fix_type``. Masking the critiques that do not exist for a program (a location past its
end, a swap at its last step) happens outside the graph, in ``masked_log_probs``: keeping a large
negative constant out of the output keeps int8 output quantization usable.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edgesmith.models.papers.ctrl.world import FIX_TYPES, L_MAX, OPS, P, VISIBLE, Problem, Program, run, valid_critiques

N_CRITIQUES = L_MAX * len(FIX_TYPES)
_SLOT = len(OPS) + (P - 1) + 1
_TEST = 4 * P
FEATURES = L_MAX * _SLOT + VISIBLE * _TEST


def encode(program: Program, problem: Problem) -> np.ndarray:
    """The critic's input for the state ``program`` of ``problem`` (see module doc)."""
    f = np.zeros(FEATURES, dtype=np.float32)
    for i in range(L_MAX):
        base = i * _SLOT
        if i < len(program):
            op, k = program[i]
            f[base + op] = 1.0
            f[base + len(OPS) + k - 1] = 1.0
        else:
            f[base + _SLOT - 1] = 1.0
    x = np.array(problem.visible_inputs)
    got, want = run(program, x), problem.visible_expected()
    base = L_MAX * _SLOT
    for t in range(VISIBLE):
        o = base + t * _TEST
        for j, v in enumerate((x[t], got[t], want[t], (want[t] - got[t]) % P)):
            f[o + j * P + int(v)] = 1.0
    return f


def encode_batch(states: list[tuple[Program, Problem]]) -> np.ndarray:
    return np.stack([encode(prog, prob) for prog, prob in states]) if states else np.zeros((0, FEATURES), np.float32)


def critique_masks(programs: list[Program]) -> np.ndarray:
    """(batch, N_CRITIQUES) boolean mask of the critiques that exist for each program."""
    return np.stack([valid_critiques(p).reshape(-1) for p in programs])


def decode(index: int) -> tuple[int, int]:
    return int(index) // len(FIX_TYPES), int(index) % len(FIX_TYPES)


class CriticNet(nn.Module):
    """MLP ``FEATURES -> hidden -> hidden -> N_CRITIQUES`` (ReLU)."""

    def __init__(self, hidden: int = 256, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, N_CRITIQUES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def masked_log_probs(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the critiques that exist (the others get probability 0)."""
    return torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
