"""dpfl-logreg: a tiny federated build over 2 torchrun processes and one tiny deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer


@pytest.fixture(scope="module")
def tiny():
    return get_producer("dpfl-logreg", tiny=True).build()


def test_tiny_build_reports_its_privacy_and_communication(tiny):
    info = tiny.run_info_
    assert info["epsilon_spent"] == pytest.approx(1.0)
    assert info["rounds"] == tiny.config.rounds
    # one float32 all-reduce of the 33 parameters per round
    assert info["bytes_sent_per_worker"] == 4 * 33 * tiny.config.rounds
    assert info["launch"]["processes"] == 2
    ev = tiny.evaluate(lambda x: tiny.module(torch.from_numpy(x)).detach().numpy())
    assert 0.0 <= ev.value <= 1.0 and np.isfinite(ev.extra["test_log_loss"])
    assert tiny.input_shape == (32,) and tiny.calibration_data(5).shape == (5, 32)


def test_tiny_deploy_reports_fp32_equal_to_torch_and_int8_close(tiny, tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    out = deploy(DeployOptions("dpfl-logreg", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref, abs=1e-6)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 0.05
