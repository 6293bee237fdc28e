"""Choosing among a deploy's rows: the budget on validation figures, cost by objective, slower rows rejected."""
from __future__ import annotations

from edgesmith.bench.decide.choose import candidates, closest_miss, pick, within_budget
from edgesmith.bench.decide.goal import Goal


def _row(variant, value, p50, size=1000, runtime="onnxruntime", provenance="measured"):
    return {"variant": variant, "runtime_label": runtime, "size_bytes": size,
            "evaluation": {"value": value}, "latency": {"1": {"p50": p50, "provenance": provenance}}}


def _figures(row):
    return row["evaluation"]["value"], row["evaluation"]["value"] - 0.001


def _choose(goal, rows, ref=0.90, higher=True):
    cands = candidates(goal, rows, ref, higher, "fp32", _figures)
    return cands, pick(cands, "fp32", goal)


def test_budget_is_absolute_in_the_metric_s_units_or_relative_to_fp32_and_reads_the_metric_s_direction():
    assert within_budget(Goal(max_drop=0.01), True, 0.90, 0.89)
    assert not within_budget(Goal(max_drop=0.01), True, 0.90, 0.8899)
    assert within_budget(Goal(max_drop=0.01, relative=True), True, 0.90, 0.891)
    assert not within_budget(Goal(max_drop=0.01, relative=True), True, 0.90, 0.890)
    assert within_budget(Goal(max_drop=0.5), False, 10.0, 10.4)  # perplexity: lower is better, a rise is the drop
    assert not within_budget(Goal(max_drop=0.5), False, 10.0, 10.6)
    assert within_budget(Goal(min_sqnr=30), True, 200.0, 31.0) and not within_budget(Goal(min_sqnr=30), True, 200, 29)


def test_the_cheapest_row_within_budget_is_chosen_and_misses_and_slowdowns_are_rejected():
    rows = [_row("fp32", 0.90, 2e-3), _row("int8", 0.895, 1e-3), _row("int4", 0.80, 0.5e-3),
            _row("pruned", 0.90, 2.5e-3)]
    cands, chosen = _choose(Goal(max_drop=0.01), rows)
    by = {c.variant: c for c in cands}
    assert chosen.variant == "int8" and chosen.verdict == "chosen" and by["int8"].over_baseline == 0.5
    assert by["int4"].verdict.startswith("rejected: misses the budget")
    assert by["pruned"].verdict.startswith("rejected: measured 1.250x the fp32 row's latency")
    assert closest_miss(cands).variant == "int4"


def test_an_estimated_cost_is_never_rejected_for_speed_since_nothing_was_timed():
    rows = [_row("fp32", 0.90, 2e-3, provenance="estimated"), _row("int8", 0.90, 3e-3, provenance="estimated")]
    by = {c.variant: c for c in _choose(Goal(max_drop=0.01), rows)[0]}
    assert by["int8"].verdict == "within budget"


def test_without_a_compressed_candidate_fp32_is_chosen_and_says_why():
    _, chosen = _choose(Goal(max_drop=0.001), [_row("fp32", 0.90, 2e-3), _row("int8", 0.85, 1e-3)])
    assert chosen.variant == "fp32" and chosen.verdict == "chosen: no compressed candidate meets the budget"
    _, chosen = _choose(Goal(max_drop=0.1), [_row("fp32", 0.90, 2e-3), _row("int8", 0.90, 3e-3)])
    assert chosen.verdict == "chosen: no compressed candidate within budget is faster"


def test_the_objective_decides_which_figure_is_the_cost():
    rows = [_row("fp32", 0.90, 2e-3, size=4000), _row("int8", 0.90, 2e-3, size=1000), _row("int4", 0.90, 1.9e-3, size=800)]
    assert _choose(Goal(max_drop=0.01, objective="size"), rows)[1].variant == "int4"
    rows[2]["latency"]["1"]["p50"] = 2.1e-3  # slower: rejected whatever the objective, as the goal promises
    assert _choose(Goal(max_drop=0.01, objective="size"), rows)[1].variant == "int8"
