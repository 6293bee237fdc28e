"""A toy program-repair world for CTRL: straight-line programs over Z_17, injected bugs, a fixed generator.

A program is a list of steps ``(op, k)`` applied in turn to an integer ``v`` modulo ``P = 17``:
``ADD`` (v + k), ``SUB`` (v - k), ``MUL`` (v * k), ``XOR`` ((v xor k) mod 17), with ``k`` in 1..16.
XOR keeps programs from being affine maps (with only ADD/SUB/MUL every program is ``a v + b`` and a
changed last constant repairs most bugs, so locations would hardly matter). A problem is a correct
program of 3-5 steps, seen only through its tests: ``VISIBLE`` input/output pairs the critic and the
generator may run, and the hidden tests (every input of Z_17) that decide whether a revision passes.
One bug is injected per problem, at a location, of one of four kinds, each undone by one fix type:

    bug                              fix type (critique)
    wrong constant k at loc          FIX_CONST  at loc: choose another k
    wrong operator at loc            FIX_OP     at loc: choose another operator (same k)
    steps loc and loc+1 swapped      SWAP       at loc: swap them back
    an extra step inserted at loc    DELETE     at loc: remove it

A critique is ``(location, fix type)``. The fixed generator (``revise``) applies exactly the hinted
edit: it lists the edits of that type at that location, keeps the one passing the most visible tests
(ties: the first in a fixed order) and applies it even when it passes none, because it trusts the
critique (that is what lets a wrong critique do harm, as with a real generator). Without a critique
it makes its default guess: FIX_CONST at the last step. The generator never searches over
locations or fix types: finding them is the critic's job.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

P = 17
OPS = ("ADD", "SUB", "MUL", "XOR")
FIX_TYPES = ("FIX_CONST", "FIX_OP", "SWAP", "DELETE")
MIN_LEN, MAX_LEN = 3, 5
L_MAX = MAX_LEN + 1  # an inserted step makes a buggy program one step longer
VISIBLE = 5

# OP_TABLE[op, k] maps every v in Z_P to the step's output, so running a program is table lookups
_V = np.arange(P)
OP_TABLE = np.stack([np.stack([(_V + k) % P for k in range(P)]),
                     np.stack([(_V - k) % P for k in range(P)]),
                     np.stack([(_V * k) % P for k in range(P)]),
                     np.stack([(_V ^ k) % P for k in range(P)])])

Program = tuple[tuple[int, int], ...]


def run(program: Program, x: np.ndarray) -> np.ndarray:
    """Outputs of ``program`` for the inputs ``x`` (any integer array with values in Z_P)."""
    v = np.asarray(x)
    for op, k in program:
        v = OP_TABLE[op, k][v]
    return v


@dataclass(frozen=True)
class Problem:
    """A spec (the correct program, hidden from critic and generator) and its tests."""

    solution: Program
    buggy: Program
    visible_inputs: tuple[int, ...]
    bug_loc: int
    bug_type: int  # index into FIX_TYPES: the fix that undoes the bug

    @property
    def expected_all(self) -> np.ndarray:
        return run(self.solution, _V)

    def visible_expected(self) -> np.ndarray:
        return run(self.solution, np.array(self.visible_inputs))


def passes(program: Program, problem: Problem) -> bool:
    """The hidden tests: ``program`` computes the spec on every input of Z_P."""
    return bool(np.array_equal(run(program, _V), problem.expected_all))


def passes_visible(program: Program, problem: Problem) -> bool:
    return bool(np.array_equal(run(program, np.array(problem.visible_inputs)), problem.visible_expected()))


def _random_step(rng: np.random.Generator) -> tuple[int, int]:
    return int(rng.integers(len(OPS))), int(rng.integers(1, P))


def inject_bug(solution: Program, loc: int, bug_type: int, rng: np.random.Generator) -> Program:
    """``solution`` with one bug of ``bug_type`` at ``loc`` (may be equivalent: the caller checks)."""
    steps = list(solution)
    op, k = steps[loc] if loc < len(steps) else (0, 1)
    if bug_type == 0:
        steps[loc] = (op, int(rng.choice([j for j in range(1, P) if j != k])))
    elif bug_type == 1:
        steps[loc] = (int(rng.choice([j for j in range(len(OPS)) if j != op])), k)
    elif bug_type == 2:
        steps[loc], steps[loc + 1] = steps[loc + 1], steps[loc]
    else:
        steps.insert(loc, _random_step(rng))
    return tuple(steps)


def sample_problem(rng: np.random.Generator) -> Problem:
    """A random correct program of 3-5 steps with one non-equivalent bug; bug type and location uniform."""
    while True:
        n = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        solution = tuple(_random_step(rng) for _ in range(n))
        bug_type = int(rng.integers(len(FIX_TYPES)))
        loc = int(rng.integers(n - 1 if bug_type == 2 else (n + 1 if bug_type == 3 else n)))
        buggy = inject_bug(solution, loc, bug_type, rng)
        if np.array_equal(run(buggy, _V), run(solution, _V)):
            continue  # e.g. two swapped additions commute: not a bug
        visible = tuple(int(v) for v in rng.choice(P, size=VISIBLE, replace=False))
        return Problem(solution, buggy, visible, loc, bug_type)


def sample_problems(n: int, seed: int) -> list[Problem]:
    rng = np.random.default_rng(seed)
    return [sample_problem(rng) for _ in range(n)]


def valid_critiques(program: Program) -> np.ndarray:
    """Mask (L_MAX, len(FIX_TYPES)) of critiques whose edit exists for ``program`` (it changes it)."""
    mask = np.zeros((L_MAX, len(FIX_TYPES)), dtype=bool)
    n = len(program)
    mask[:n, 0] = mask[:n, 1] = True
    mask[: max(n - 1, 0), 2] = True
    if n > 1:
        mask[:n, 3] = True
    return mask


def candidate_edits(program: Program, loc: int, fix_type: int) -> list[Program]:
    """Every edit of ``fix_type`` at ``loc``, in the generator's fixed order (empty if none exists)."""
    steps = list(program)
    if not (0 <= loc < L_MAX and 0 <= fix_type < len(FIX_TYPES)) or not valid_critiques(program)[loc, fix_type]:
        return []
    op, k = steps[loc]
    if fix_type == 0:
        return [tuple(steps[:loc] + [(op, j)] + steps[loc + 1:]) for j in range(1, P) if j != k]
    if fix_type == 1:
        return [tuple(steps[:loc] + [(j, k)] + steps[loc + 1:]) for j in range(len(OPS)) if j != op]
    if fix_type == 2:
        return [tuple(steps[:loc] + [steps[loc + 1], steps[loc]] + steps[loc + 2:])]
    return [tuple(steps[:loc] + steps[loc + 1:])]


def revise(program: Program, problem: Problem, critique: tuple[int, int] | None) -> Program:
    """The fixed generator: apply the hinted edit (see module doc); ``None`` makes the default guess."""
    loc, fix_type = (len(program) - 1, 0) if critique is None else (int(critique[0]), int(critique[1]))
    candidates = candidate_edits(program, loc, fix_type)
    if not candidates:
        return program
    x = np.array(problem.visible_inputs)
    want = problem.visible_expected()
    scores = [int(np.sum(run(c, x) == want)) for c in candidates]
    return candidates[int(np.argmax(scores))]


def passing_critiques(program: Program, problem: Problem) -> np.ndarray:
    """Mask (L_MAX, len(FIX_TYPES)) of the critiques after which the generator's revision passes:
    the execution-built feedback that stage 1 (SFT) imitates."""
    good = np.zeros((L_MAX, len(FIX_TYPES)), dtype=bool)
    for loc, fix_type in zip(*np.nonzero(valid_critiques(program))):
        good[loc, fix_type] = passes(revise(program, problem, (loc, fix_type)), problem)
    return good
