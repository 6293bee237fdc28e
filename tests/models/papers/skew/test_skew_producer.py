"""The skew-spectrum producer: in-graph spectrum, config checks, reproducibility and one tiny deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.skew.producer import SkewConfig, SkewSpectrumProducer, atlas_dataset
from edgesmith.models.papers.skew.spectrum import hom_counts


def test_input_shape_needs_no_data_or_training():
    p = get_producer("skew-spectrum", tiny=True)
    assert p.input_shape == (49,)
    assert not hasattr(p, "splits_") and not hasattr(p, "module_")


def test_config_rejects_bad_fields_and_round_trips_json():
    with pytest.raises(EdgesmithError, match="k"):
        SkewConfig(k=5)
    with pytest.raises(EdgesmithError, match="test_fraction"):
        SkewConfig(test_fraction=0.9)
    with pytest.raises(EdgesmithError, match="no option"):
        SkewConfig.from_dict({"depth": 3})
    c = SkewConfig(k=3, epochs=7)
    assert SkewConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_in_graph_features_are_log_hom_counts_of_every_pattern():
    p = SkewSpectrumProducer(tiny=True)
    a, _ = atlas_dataset()
    a = a[::50].astype(np.float64)
    m = p._make_module()
    got = m.features(torch.from_numpy(a.reshape(len(a), -1)).float()).numpy()
    want = np.log1p(np.stack([hom_counts(a, q) for q in p.patterns()], axis=1))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_tiny_build_is_reproducible_for_a_seed(tmp_path, monkeypatch):
    states = []
    for i in range(2):  # separate caches, so both builds train
        monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / f"c{i}"))
        states.append(SkewSpectrumProducer(seed=1, tiny=True, epochs=30).build().module.state_dict())
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


def test_check_input_rejects_non_adjacency_rows():
    p = SkewSpectrumProducer(tiny=True)
    with pytest.raises(EdgesmithError, match="adjacency"):
        p.check_input(np.full((1, 49), 0.5, np.float32))
    with pytest.raises(EdgesmithError, match="shape"):
        p.check_input(np.zeros((1, 36), np.float32))


def test_tiny_deploy_scores_fp32_like_torch_and_int8_close(tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    out = deploy(DeployOptions("skew-spectrum", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]
    assert ref["extra"]["max_abs_output_change_under_relabelling"] < 1e-4  # invariant by construction
    rows = {r["variant"]: r for r in report["results"] if r["runtime"] == "onnxruntime"}
    assert rows["fp32"]["evaluation"]["value"] == pytest.approx(ref["value"], abs=1e-9)
    assert abs(rows["int8"]["evaluation"]["value"] - ref["value"]) < 0.1
    assert any("Einsum" in n for n in report["notes"])
