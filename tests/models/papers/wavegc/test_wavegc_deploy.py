"""One tiny end-to-end deploy of the wavegc producer: fp32 ONNX matches torch, int8/int4 stay close."""
from __future__ import annotations

import json

import numpy as np
import torch

from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
from edgesmith.hardware import PlanOptions
from edgesmith.models import get_producer


def test_tiny_wavegc_deploy_reports_torch_metric_for_fp32_and_close_int8(tmp_path):
    out = deploy(DeployOptions("wavegc", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r for r in report["results"]}
    assert {"fp32", "int8", "int4"} <= set(rows)
    assert abs(rows["fp32"]["evaluation"]["value"] - ref) < 1e-4
    for v in ("int8", "int4"):
        assert np.isfinite(rows[v]["evaluation"]["value"])
        assert abs(rows[v]["evaluation"]["value"] - ref) < 0.1 * ref
    assert any("eigendecomposition" in n for n in report["notes"])
    producer = get_producer("wavegc", tiny=True).build()
    with torch.no_grad():
        assert producer.evaluate(lambda x: producer.module(torch.from_numpy(x)).numpy()).value == ref
