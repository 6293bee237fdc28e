"""Every registered target documents itself: cited coefficients, budget source, provenance."""
from __future__ import annotations

import json

import pytest

from edgesmith.hardware import get_target, target_names
from edgesmith.common import EdgesmithError


def test_the_three_targets_are_registered():
    assert {"host-cpu", "jetson-orin-nano", "loihi2"} <= set(target_names())


@pytest.mark.parametrize("name", ["host-cpu", "jetson-orin-nano", "loihi2"])
def test_every_coefficient_has_a_source_and_a_positive_value(name):
    coeffs = get_target(name).cost_model.coefficients
    assert coeffs
    for key, c in coeffs.items():
        assert c.name == key
        assert c.value > 0, key
        assert len(c.source.strip()) > 20, f"{key} has no real citation"
        assert c.unit.strip(), key


@pytest.mark.parametrize("name", ["host-cpu", "jetson-orin-nano", "loihi2"])
def test_describe_lists_every_coefficient_with_its_source_and_is_json(name):
    t = get_target(name)
    d = json.loads(json.dumps(t.describe()))
    listed = {c["name"]: c for c in d["coefficients"]}
    assert set(listed) == set(t.cost_model.coefficients)
    assert all(c["source"] for c in listed.values())
    assert d["memory_budget_source"] and d["memory_budget_bytes"] > 0
    assert d["latency_provenance"] in ("measured", "estimated")


def test_only_the_host_measures_latency():
    assert get_target("host-cpu").latency_provenance == "measured"
    assert get_target("jetson-orin-nano").latency_provenance == "estimated"
    assert get_target("loihi2").latency_provenance == "estimated"


def test_check_fits_refuses_a_model_over_budget():
    t = get_target("loihi2")
    t.check_fits(t.memory_budget_bytes, "exactly the budget")
    with pytest.raises(EdgesmithError, match="budget"):
        t.check_fits(t.memory_budget_bytes + 1, "one byte too many")
