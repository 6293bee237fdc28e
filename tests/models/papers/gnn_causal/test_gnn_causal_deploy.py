"""One tiny end-to-end deploy of gnn-iia: fp32 ONNX matches torch, int8/int4 stay close, IIA in extra."""
from __future__ import annotations

import json

import numpy as np
import torch

from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
from edgesmith.hardware import PlanOptions
from edgesmith.models import get_producer


def test_tiny_gnn_iia_deploy_reports_torch_metric_for_fp32_and_close_int8(tmp_path):
    out = deploy(DeployOptions("gnn-iia", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]
    rows = {r["variant"]: r for r in report["results"]}
    assert {"fp32", "int8", "int4"} <= set(rows)
    assert rows["fp32"]["evaluation"]["value"] == ref["value"]
    assert 0.0 <= ref["extra"]["iia_input_site"] <= 1.0
    for v in ("int8", "int4"):
        assert np.isfinite(rows[v]["evaluation"]["value"])
        assert abs(rows[v]["evaluation"]["value"] - ref["value"]) <= 0.1
    producer = get_producer("gnn-iia", tiny=True).build()
    with torch.no_grad():
        torch_eval = producer.evaluate(lambda x: producer.module(torch.from_numpy(x)).numpy())
    assert torch_eval.value == ref["value"]
    assert torch_eval.extra["prompt"] == producer.prompt
