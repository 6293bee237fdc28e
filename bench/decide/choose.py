"""The choice: which (variant, runtime) row of a deploy meets the budget and costs least.

Every row is a candidate. Its metric is read on the validation part of the evaluation data (the budget's test)
and on the held-out rest (the figure reported); its cost is the objective's figure at the goal's batch, measured
where the target is this machine and estimated by the target's cost model elsewhere, with its provenance. A
candidate is rejected when it misses the budget, when it is measured slower than the uncompressed variant in the
same runtime, or when its cost is unknown; the cheapest of the rest is chosen, and the uncompressed variant when
none is left.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from edgesmith.bench.decide.goal import Goal


@dataclass
class Candidate:
    variant: str
    runtime: str  # the row's runtime label ("onnxruntime", "tvm (tuned, 64 trials)")
    validation: float | None  # the metric on the validation part (the whole evaluation when the producer has no split)
    held_out: float | None
    drop: float | None  # validation drop from fp32's validation figure, in the metric's units (worse is positive)
    cost: float | None
    cost_provenance: str
    over_baseline: float | None = None  # cost / the uncompressed variant's in the same runtime
    latency_over_baseline: float | None = None  # p50 at the goal's batch / the uncompressed variant's, where measured
    within_budget: bool = False
    verdict: str = ""  # "chosen", "within budget", or "rejected: why"
    restored: list[str] = field(default_factory=list)  # layers put back in higher precision by the search
    artifact: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def metric_drop(higher_is_better: bool, reference: float, value: float) -> float:
    """How much worse ``value`` is than ``reference``, in the metric's units (positive: worse)."""
    return reference - value if higher_is_better else value - reference


def within_budget(goal: Goal, higher_is_better: bool, reference: float, value: float) -> bool:
    if value is None or not math.isfinite(value):
        return False
    if goal.min_sqnr is not None:
        return value >= goal.min_sqnr
    allowed = goal.max_drop * abs(reference) if goal.relative else goal.max_drop
    return metric_drop(higher_is_better, reference, value) <= allowed + 1e-12


def row_cost(goal: Goal, row: dict) -> tuple[float | None, str]:
    """(the objective's figure for a report row, its provenance)."""
    b = str(goal.batch)
    entry = row.get("latency", {}).get(b)
    if goal.objective == "latency":
        return (entry["p50"], entry["provenance"]) if entry else (None, f"batch {b} was not timed")
    if goal.objective == "energy":
        e = row.get("energy") or {}
        per = e.get("energy_j_per_sample")
        return (per, e.get("provenance", "?")) if per is not None else (None, "no energy figure")
    if goal.objective == "size":
        return float(row["size_bytes"]), "measured (bytes on disk)"
    if entry and entry.get("peak_rss_bytes"):
        return float(entry["peak_rss_bytes"]), "measured (peak RSS of the timing process)"
    return float(row["size_bytes"]), "estimated (the artifact's size: no memory was measured for this row)"


def _measured_p50(goal: Goal, row: dict) -> float | None:
    entry = row.get("latency", {}).get(str(goal.batch))
    return entry["p50"] if entry and entry.get("provenance") == "measured" else None


def judge(c: Candidate, goal: Goal, baseline: str) -> Candidate:
    """Set ``c.verdict``: within budget, or rejected with why."""
    if not c.within_budget:
        c.verdict = "rejected: misses the budget on the validation part"
    elif c.cost is None:
        c.verdict = f"rejected: no {goal.objective} figure ({c.cost_provenance})"
    elif c.variant != baseline and c.latency_over_baseline is not None and c.latency_over_baseline > 1.0:
        c.verdict = (f"rejected: measured {c.latency_over_baseline:.3f}x the {baseline} row's latency in the same "
                     "runtime (a compressed artifact slower than fp32 is never chosen)")
    else:
        c.verdict = "within budget"
    return c


def candidates(goal: Goal, rows: list[dict], reference_validation: float, higher_is_better: bool,
               baseline: str, figures, baseline_costs: dict | None = None) -> list[Candidate]:
    """One judged Candidate per row. ``figures(row)`` gives its (validation figure, held-out figure); the
    uncompressed variant's (``baseline``) cost per runtime comes from ``rows`` or ``baseline_costs``."""
    base_cost = dict(baseline_costs or {})
    base_latency = {}
    for r in rows:
        if r["variant"] == baseline:
            base_cost[r["runtime_label"]] = row_cost(goal, r)[0]
            base_latency[r["runtime_label"]] = _measured_p50(goal, r)
    out = []
    for r in rows:
        val, held = figures(r)
        cost, provenance = row_cost(goal, r)
        ref_cost = base_cost.get(r["runtime_label"])
        c = Candidate(r["variant"], r["runtime_label"], val, held,
                      None if val is None else metric_drop(higher_is_better, reference_validation, val),
                      cost, provenance, None if cost is None or not ref_cost else cost / ref_cost,
                      restored=list(r.get("restored_layers", [])), artifact=r.get("artifact"))
        p50, ref_p50 = _measured_p50(goal, r), base_latency.get(r["runtime_label"])
        if p50 is not None and ref_p50:
            c.latency_over_baseline = p50 / ref_p50
        c.within_budget = val is not None and within_budget(goal, higher_is_better, reference_validation, val)
        out.append(judge(c, goal, baseline))
    return out


def pick(cands: list[Candidate], baseline: str, goal: Goal) -> Candidate | None:
    """The cheapest candidate within budget and not rejected (the one with the lower ratio to the uncompressed
    variant on a tie); else the baseline's cheapest row; None when there is neither."""
    ok = [c for c in cands if c.verdict == "within budget"]
    pool = ok or [c for c in cands if c.variant == baseline and c.cost is not None]
    if not pool:
        return None
    best = min(pool, key=lambda c: (c.cost, c.over_baseline or 0.0))
    if best.variant != baseline:
        best.verdict = "chosen"
    elif all(c.variant == baseline for c in cands):
        best.verdict = "chosen: the target's plan has no other variant" if best.within_budget else \
            "chosen: the target's plan has no other variant, and it misses the budget"
    elif any(c.within_budget and c.variant != baseline for c in cands):
        best.verdict = ("chosen: no compressed candidate within budget is faster" if goal.objective == "latency"
                        else f"chosen: no compressed candidate within budget costs less ({goal.objective})")
    else:
        best.verdict = "chosen: no compressed candidate meets the budget"
    return best


def closest_miss(cands: list[Candidate]) -> Candidate | None:
    """The compressed candidate that came nearest the budget (smallest drop) among those that missed it."""
    missed = [c for c in cands if not c.within_budget and c.drop is not None]
    return min(missed, key=lambda c: c.drop, default=None)
