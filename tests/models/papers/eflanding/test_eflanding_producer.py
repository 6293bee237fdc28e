"""ef-landing-pca: a tiny distributed build (2 torchrun processes), its metric and one tiny deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer


@pytest.fixture(scope="module")
def tiny():
    return get_producer("ef-landing-pca", tiny=True).build()


def test_tiny_build_learns_a_near_optimal_projection(tiny):
    ev = tiny.evaluate(lambda x: tiny.module(torch.from_numpy(x)).detach().numpy())
    assert ev.extra["evr_gap"] < 0.05 and ev.value > 0.5
    assert tiny.run_info_["feasibility"] < 1e-3
    # the communication was compressed: top-k 10% sends 20% of the floats of the uncompressed run
    assert tiny.run_info_["floats_sent_per_worker"] == pytest.approx(0.2 * 250 * tiny.config.iters)


def test_retraining_with_the_same_seed_gives_the_same_weights(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))  # an empty cache: the second build trains again
    again = get_producer("ef-landing-pca", tiny=True).build()
    assert torch.equal(again.module.encode.weight, tiny.module.encode.weight)
    assert tiny.input_shape == (50,) and tiny.calibration_data(7).shape == (7, 50)


def test_tiny_deploy_reports_fp32_equal_to_torch_and_int8_close(tiny, tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    out = deploy(DeployOptions("ef-landing-pca", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref, abs=1e-5)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 0.05
