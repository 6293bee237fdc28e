"""The Goal config: one budget, validated fields, the CLI's drop forms, a JSON round trip."""
from __future__ import annotations

import pytest

from edgesmith.bench.decide import Goal
from edgesmith.common import EdgesmithError


@pytest.mark.parametrize("fields, match", [
    ({}, "both missing"),
    ({"max_drop": 0.01, "min_sqnr": 30}, "both given"),
    ({"max_drop": -0.1}, "max_drop"),
    ({"max_drop": True}, "max_drop"),
    ({"max_drop": 1.5, "relative": True}, "relative drop below 100%"),
    ({"min_sqnr": "thirty"}, "min_sqnr"),
    ({"max_drop": 0.01, "objective": "speed"}, "objective"),
    ({"max_drop": 0.01, "batch": 0}, "batch"),
    ({"max_drop": 0.01, "validation_fraction": 1.0}, "validation_fraction"),
    ({"max_drop": 0.01, "restore": "yes"}, "restore"),
    ({"max_drop": 0.01, "allow_qat": 1}, "allow_qat"),
    ({"max_drop": 0.01, "qat_epochs": 0}, "qat_epochs"),
])
def test_a_bad_goal_is_refused_naming_the_field(fields, match):
    with pytest.raises(EdgesmithError, match=match):
        Goal(**fields)


def test_max_drop_reads_a_percentage_as_relative_and_a_number_in_the_metric_s_units():
    assert Goal.parse_drop("1%") == (0.01, True)
    assert Goal.parse_drop(" 0.5 ") == (0.5, False)
    with pytest.raises(EdgesmithError, match="--max-drop 'one' is not a number"):
        Goal.parse_drop("one")


def test_goal_round_trips_through_json_and_says_its_budget():
    g = Goal(max_drop=0.01, relative=True, objective="size", batch=8)
    assert Goal.from_dict(g.to_dict()) == g
    assert g.describe() == "a drop of at most 1.00% of the fp32 figure"
    assert Goal(min_sqnr=30).describe() == "output SQNR of at least 30 dB against fp32"
