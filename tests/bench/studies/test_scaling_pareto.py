"""Pareto-front extraction and the scaling study at --quick settings on an estimated target."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import scaling_pareto
from edgesmith.common import EdgesmithError


def test_pareto_front_on_a_hand_case():
    costs = [1, 2, 3, 4, 2, 5]
    acc = [0.5, 0.7, 0.6, 0.9, 0.7, 0.9]
    # (3, 0.6) is beaten by (2, 0.7); (5, 0.9) by (4, 0.9); the two equal points (2, 0.7) do not dominate each other
    assert scaling_pareto.pareto_front(costs, acc) == [True, True, False, True, True, False]


def test_quick_study_writes_tables_plots_and_skips_the_router_on_loihi(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "pareto"
    assert scaling_pareto.main(["--out", str(out), "--quick", "--targets", "jetson-orin-nano"]) == 0
    table = json.loads((out / "table.json").read_text())
    rows = table["rows"]
    assert {r["model"] for r in rows} == {"student-w8", "router-w8"}
    assert all(r["latency_provenance"] == "estimated" and r["energy_provenance"] == "estimated" for r in rows)
    assert any(r["pareto_params"] for r in rows)
    assert (out / "pareto_jetson-orin-nano.png").stat().st_size > 0
    with pytest.raises(EdgesmithError):
        scaling_pareto.main(["--out", str(out), "--quick", "--targets", "jetson-orin-nano"])


def test_loihi_support_names_why_the_router_cannot_be_mapped(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    from edgesmith.models import get_producer

    router = get_producer("scaling-student", tiny=True, width=8, router=True).build()
    student = get_producer("scaling-student", tiny=True, width=8).build()
    assert "ScaledOut" in scaling_pareto.loihi_support(router)
    assert scaling_pareto.loihi_support(student) is None
