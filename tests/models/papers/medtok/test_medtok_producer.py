"""The medtok producer: data properties, reproducibility, and one tiny deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.models.papers.medtok.data import Ontology, OntologyConfig
from edgesmith.models.papers.medtok.producer import MedTokProducer, token_stability


def test_input_shape_needs_no_data_or_training():
    p = get_producer("medtok", tiny=True)
    cfg = OntologyConfig.tiny()
    assert p.input_shape == (cfg.seq_len * cfg.per_code,)
    assert not hasattr(p, "onto_") and not hasattr(p, "module_")


def test_training_patients_never_contain_unseen_codes_and_labels_follow_ancestry():
    o = Ontology(OntologyConfig.tiny(seed=3))
    codes, y = o.patients("train")
    assert not np.isin(codes, o.unseen).any()
    risky = np.isin(o.group_of_code[codes], o.risk_groups).sum(1) >= 2
    assert np.mean(risky == y.astype(bool)) > 0.85  # only the label noise disagrees
    assert np.isin(o.patients("test")[0], o.unseen).any()


def test_token_stability_counts_changed_assignments():
    ref = np.zeros((2, 3, 4, 5))
    ids = ref.copy()
    ids[0, 0, 0, 0] = 1  # one top-1 change
    ids[1, 0, 0, 4] = 1  # one change further down the top-5 list
    s = token_stability(ids, ref)
    assert s["top1_unchanged"] == pytest.approx(1 - 1 / 24)
    assert s["topk_unchanged"] == pytest.approx(1 - 2 / 24)


def test_tiny_build_is_reproducible_for_a_seed(tmp_path, monkeypatch):
    states = []
    for i in range(2):
        monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / f"c{i}"))
        states.append(MedTokProducer(seed=2, tiny=True, tok_steps=5).build().module.state_dict())
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


def test_tiny_deploy_scores_fp32_like_torch_and_int8_close(tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    out = deploy(DeployOptions("medtok", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]
    assert ref["extra"]["token_stability"]["top1_unchanged"] == 1.0
    rows = {r["variant"]: r for r in report["results"] if r["runtime"] == "onnxruntime"}
    assert rows["fp32"]["evaluation"]["value"] == pytest.approx(ref["value"], abs=1e-6)
    assert rows["fp32"]["evaluation"]["extra"]["token_stability"]["top1_unchanged"] > 0.99
    int8 = rows["int8"]["evaluation"]
    assert np.isfinite(int8["value"]) and abs(int8["value"] - ref["value"]) < 0.2
    assert 0.0 <= int8["extra"]["token_stability"]["top1_unchanged"] <= 1.0
