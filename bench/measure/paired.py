"""Paired latency: several loaded models timed round-robin in one process, so load that comes and goes on a shared
machine hits each of them alike and their ratios hold where their absolute times drift.

Each round times every model for ``calls`` calls (after ``warmup`` calls each, once) and keeps each one's median;
a model's p50 is the median of its per-round medians, and its ratio to a reference the median of per-round ratios.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass
class PairedTiming:
    p50_s: dict  # key -> median over rounds of the per-round medians
    rounds_s: dict  # key -> each round's median
    calls: int
    method: str

    def ratio(self, key, reference) -> float:
        """``key``'s time over ``reference``'s: the median of the per-round ratios."""
        return float(np.median(np.array(self.rounds_s[key]) / np.array(self.rounds_s[reference])))


def time_paired(calls_of: dict, *, rounds: int = 5, calls: int = 20, warmup: int = 5,
                progress: Callable[[str], None] = lambda m: None) -> PairedTiming:
    """``calls_of``: key -> a function that makes one call. Returns the per-key p50 and the per-round medians."""
    for fn in calls_of.values():
        for _ in range(warmup):
            fn()
    per_round = {k: [] for k in calls_of}
    for r in range(rounds):
        for key, fn in calls_of.items():
            ts = []
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            per_round[key].append(float(np.median(ts)))
        progress(f"paired timing: round {r + 1} of {rounds}")
    return PairedTiming({k: float(np.median(v)) for k, v in per_round.items()}, per_round, calls,
                        f"measured: {len(calls_of)} models timed round-robin in one process, {rounds} rounds of {calls} "
                        f"calls each after {warmup} warm-up calls; p50 = median of per-round medians, a ratio = median of "
                        "per-round ratios")
