"""The goal-driven search over a deploy's rows: restore layers where a quantized variant misses the budget, time
the candidates within budget side by side, choose.

``search`` needs a ``session`` from the deploy that ran the rows (``bench.pipeline.deploy``):
``results`` (report rows, appended to as restored variants are measured), ``variants`` (their report entries),
``plan_variants`` (the planned ``Variant`` objects), ``baseline`` (the uncompressed variant's name),
``higher_is_better``, ``reference`` (``SplitEvaluation`` or None), ``measured`` (latency measured on this machine),
and the calls ``score(variant) -> validation figure``, ``measure(variant) -> report row`` and
``timing_call(row) -> a zero-argument call, or None``.
"""
from __future__ import annotations

import time

from edgesmith.bench.decide.choose import candidates, closest_miss, judge, pick, within_budget
from edgesmith.bench.decide.goal import Goal
from edgesmith.bench.decide.restore import restore
from edgesmith.bench.measure.paired import time_paired


def _figures(row: dict, split: bool) -> tuple[float | None, float | None]:
    if split and row.get("evaluation_split"):
        s = row["evaluation_split"]
        return s["validation"]["value"], s["held_out"]["value"]
    value = row["evaluation"]["value"]
    return value, value


def search(goal: Goal, session, say=lambda m: None) -> dict:
    t0 = time.perf_counter()
    split = session.reference is not None
    ref_val = session.reference.validation.value if split else session.reference_value
    hib = session.higher_is_better
    baseline = session.baseline
    figures = (lambda r: _figures(r, split))
    cands = candidates(goal, session.results, ref_val, hib, baseline, figures)
    searched = []

    def ok(value: float) -> bool:
        return within_budget(goal, hib, ref_val, value)

    if goal.restore:
        primary = {v.name: v.runtimes[0] for v in session.plan_variants}
        missed = sorted((c for c in cands if not c.within_budget and c.variant != baseline and c.cost is not None
                         and c.runtime == primary.get(c.variant)), key=lambda c: c.cost)
        for c in missed:
            best = min((x.cost for x in cands if x.verdict == "within budget" and x.runtime == c.runtime),
                       default=None)
            entry = {"variant": c.variant, "runtime": c.runtime}
            if best is not None and c.cost >= best:
                # restoring layers only adds cost: this one cannot beat a candidate already within budget
                entry["outcome"] = "not searched: its cost before restoring is already above a candidate within budget"
                searched.append(entry)
                continue
            variant = next(v for v in session.plan_variants if v.name == c.variant)
            reports = next((v["pass_reports"] for v in session.variants if v["name"] == c.variant), [])
            say(f"[edgesmith] {c.variant} misses the budget ({c.validation:.4g} on validation): restoring layers")
            found = restore(variant, reports, session.score, ok, say, progress=session.progress)
            if found is None:
                entry["outcome"] = "not searched: its passes rank no layers to restore"
            elif found.variant is None:
                entry.update(outcome="misses even with every ranked layer restored", probes=found.probes)
            elif len(found.layers) == len(found.ranked):
                # every layer back in fp32 is the uncompressed model with extra nodes: not a candidate of its own
                entry.update(outcome=f"meets the budget only with all {len(found.layers)} ranked layers restored, "
                             "which is the uncompressed model", probes=found.probes)
            else:
                row = session.measure(found.variant)
                row["restored_layers"] = found.layers
                entry.update(outcome=f"within budget with {len(found.layers)} layer(s) restored",
                             result=found.variant.name, layers=found.layers, probes=found.probes)
                new = candidates(goal, [row], ref_val, hib, baseline, figures,
                                 baseline_costs={x.runtime: x.cost for x in cands if x.variant == baseline})
                cands += new
            searched.append(entry)

    trained = None
    if goal.allow_qat and not any(c.within_budget and c.variant != baseline for c in cands):
        qat, why = session.qat_variants(goal.qat_epochs)
        trained = {"outcome": why or f"built {', '.join(v.name for v in qat)} ({goal.qat_epochs} epochs each)"}
        for v in qat:
            say(f"[edgesmith] no post-training candidate meets the budget: training {v.name} ({goal.qat_epochs} epochs)")
            row = session.measure(v)
            cands += candidates(goal, [row], ref_val, hib, baseline, figures,
                                baseline_costs={x.runtime: x.cost for x in cands if x.variant == baseline})

    timing = None
    if session.measured:  # every candidate within budget timed beside fp32: a slower one is never chosen
        keys = [c for c in cands if c.within_budget or c.variant == baseline]
        calls = {}
        for c in keys:
            row = next(r for r in session.results if r["variant"] == c.variant and r["runtime_label"] == c.runtime)
            call = session.timing_call(row)
            if call is not None:
                calls[(c.variant, c.runtime)] = call
        if len(calls) > 1:
            say(f"[edgesmith] timing {len(calls)} candidates side by side (batch {goal.batch})")
            paired = time_paired(calls, progress=lambda m: say(f"[edgesmith] {m}"))
            timing = {"method": paired.method, "p50_s": {f"{v} on {r}": p for (v, r), p in paired.p50_s.items()}}
            for c in cands:
                key, base = (c.variant, c.runtime), (baseline, c.runtime)
                if key not in calls:
                    continue
                c.latency_over_baseline = paired.ratio(key, base) if base in calls else c.latency_over_baseline
                if goal.objective == "latency":
                    c.cost = paired.p50_s[key]
                    c.cost_provenance = "measured (paired, in one process)"
                    c.over_baseline = c.latency_over_baseline
                judge(c, goal, baseline)
    chosen = pick(cands, baseline, goal)
    miss = closest_miss(cands)
    warnings = []
    n_val = session.reference.validation.n_samples if split else None
    if goal.max_drop is not None and n_val and hib and 0.0 <= ref_val <= 1.0:
        # a fraction scored on n samples moves by about sqrt(p(1-p)/n) from draw to draw: a budget below twice
        # that is not resolved by this much data, and the held-out figure may miss what validation met
        se = max(ref_val * (1 - ref_val), 1.0 / n_val) ** 0.5 / n_val ** 0.5
        allowed = goal.max_drop * abs(ref_val) if goal.relative else goal.max_drop
        if 2 * se > allowed:
            warnings.append(f"the validation part's {n_val} samples do not resolve a drop of {allowed:.3g}: its "
                            f"{session.metric_name} moves by about {se:.3g} (one standard error) between draws, "
                            f"so the held-out figure can miss a budget validation met; give about "
                            f"{int(4 * max(ref_val * (1 - ref_val), 0.01) / allowed ** 2) * 2} evaluation samples")
    for w in warnings:
        say(f"[edgesmith] warning: {w}")
    return {
        "goal": goal.to_dict(),
        "budget": goal.describe(),
        "baseline": baseline,
        "metric": session.metric_name,
        "higher_is_better": hib,
        "split": session.split_note,
        "reference": {"validation": ref_val,
                      "held_out": session.reference.held_out.value if split else session.reference_value},
        "candidates": [c.to_dict() for c in cands],
        "chosen": None if chosen is None else chosen.to_dict(),
        "closest_miss": None if miss is None else miss.to_dict(),
        "restore_search": searched,
        "qat": trained,
        "paired_timing": timing,
        "search_s": round(time.perf_counter() - t0, 2),
        "warnings": warnings,
    }
