"""The self-consuming producer: reproducible reward model, its metric, and a tiny deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import os

    os.environ["EDGESMITH_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return get_producer("self-consuming", tiny=True).build()
    finally:
        os.environ.pop("EDGESMITH_CACHE")


def _predict(module):
    return lambda x: module(torch.from_numpy(np.asarray(x, dtype=np.float32))).detach().numpy()


def test_same_seed_gives_the_same_weights(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    again = get_producer("self-consuming", tiny=True).build()
    for a, b in zip(again.module.state_dict().values(), tiny.module.state_dict().values()):
        assert torch.equal(a, b)


def test_metric_is_pairwise_accuracy_and_curation_raises_reward(tiny):
    ev = tiny.evaluate(_predict(tiny.module))
    assert 0.7 < ev.value <= 1
    assert ev.extra["curated_expected_reward_topk"] > ev.extra["uncurated_expected_reward"]
    # the negated reward orders every pair the other way
    assert tiny.evaluate(lambda x: -_predict(tiny.module)(x)).value < 0.3
    with pytest.raises(EdgesmithError):
        tiny.check_input(np.zeros((3, 3), dtype=np.float32))


def test_tiny_deploy_reports_fp32_equal_to_torch_and_a_close_int8(tmp_path, monkeypatch):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    out = deploy(DeployOptions("self-consuming", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 0.05
