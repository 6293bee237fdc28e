"""The typed deploy report reads every report.json a deploy writes and gives back the very same dict."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
from edgesmith.bench.report.schema import DeployReport

FAST = dict(reps=5, warmup=1, batch_sizes=(1, 8))


@pytest.mark.parametrize("model, target, variants", [
    ("digits-mlp", "host-cpu", ("fp32", "int8")),  # measured latency, OOD section
    ("digits-mlp", "jetson-orin-nano", ("fp32",)),  # estimated latency with a cost-model breakdown
    ("gbrl-cartpole", "host-cpu", ("trees",)),  # another kind: decisions/s
])
def test_a_deploy_report_round_trips_through_the_typed_records(tmp_path, model, target, variants):
    from edgesmith.hardware import PlanOptions

    out = deploy(DeployOptions(model, target, tmp_path / "r", plan=PlanOptions(tvm=False, variants=list(variants)),
                               model_options={"steps": 2048, "cache": False} if model.startswith("gbrl") else {},
                               **FAST))
    raw = json.loads((out / "report.json").read_text())
    report = DeployReport.load(out / "report.json")
    assert report.to_dict() == raw
    assert json.dumps(report.to_dict()) == json.dumps(raw)  # key order too: rewritten, the file is the same
    assert [r.variant for r in report.results] == list(variants)
    row = report.results[0]
    assert set(row.latency) == {1, 8} and row.latency[8].provenance in ("measured", "estimated")
    assert row.speed[1].unit.endswith("/s") and row.evaluation.metric == report.reference.evaluation.metric
    assert report.row(variants[0], row.runtime) is row and report.target_name == target
