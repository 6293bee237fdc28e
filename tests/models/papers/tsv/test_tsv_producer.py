"""tsv-rwkv: the fact world, the splits, reproducibility, the exported detector, one tiny deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.tsv.facts import PAD, WorldConfig, corpus, make_world, pack, qa_examples


@pytest.fixture(scope="module")
def tiny():
    return get_producer("tsv-rwkv", seed=0, tiny=True).build()


def test_world_config_rejects_bad_fields():
    with pytest.raises(EdgesmithError):
        WorldConfig(n_entities=2)
    with pytest.raises(EdgesmithError):
        WorldConfig(n_entities=10, n_judge_entities=9)
    assert WorldConfig.from_json(WorldConfig().to_json()) == WorldConfig()


def test_detection_facts_never_get_a_verdict_in_the_fine_tuning_text():
    w = make_world(WorldConfig(n_entities=10, n_judge_entities=4), seed=1)
    text = bytes(corpus(w, 3000, np.random.default_rng(0)).astype(np.uint8)).decode()
    judged = [ln for ln in text.split(PAD) if ln.endswith((" Right.", " Wrong."))]
    assert judged and all(any(e in ln for e in w.judge_entities) for ln in judged)
    for ln in text.split(PAD):
        if ln and not ln.endswith((" Right.", " Wrong.")):  # unjudged statements are all true
            assert any(w.facts[p] in ln and p[0] in ln and p[1] in ln for p in w.pairs())


def test_examples_pair_each_truthful_answer_with_a_wrong_one_and_pack_right_aligned():
    w = make_world(WorldConfig(n_entities=6, n_judge_entities=2), seed=0)
    texts, labels = qa_examples(w, w.detection_pairs()[:3], np.random.default_rng(0))
    assert labels.tolist() == [1, 0] * 6
    tok = pack(texts, 40)
    assert tok.shape == (12, 40) and (tok[:, -1] == ord(".")).all() and (tok[:, 0] == ord(PAD)).all()
    with pytest.raises(EdgesmithError):
        pack(["x" * 41], 40)


def test_test_questions_are_never_asked_in_training_responses(tiny):
    s = tiny.splits()
    as_text = lambda rows: {bytes(r.astype(np.uint8)).decode().strip().rsplit(" ", 1)[0] for r in rows}  # noqa: E731
    assert not as_text(s.test) & (as_text(s.exemplars) | as_text(s.wild))
    assert len(s.exemplars) == 16 and set(s.exemplar_labels.tolist()) == {0, 1}


def test_same_seed_gives_the_same_detector_and_input_shape_needs_no_build(tiny):
    assert get_producer("tsv-rwkv", tiny=True).input_shape == (32,)
    other = get_producer("tsv-rwkv", seed=0, tiny=True)
    other._tsv_cache().unlink(missing_ok=True)  # retrain the detector (the LM comes from the cache)
    other.build()
    x = tiny.calibration_data(6)
    with torch.no_grad():
        a, b = other.module(torch.from_numpy(x)), tiny.module(torch.from_numpy(x))
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_detector_output_is_a_probability_and_the_metric_is_its_auroc(tiny):
    from edgesmith.models.papers.ood.scores import auroc

    s = tiny.splits()
    with torch.no_grad():
        p = tiny.module(torch.from_numpy(s.test.astype(np.float32))).numpy()
    assert p.shape == (len(s.test), 1) and ((p >= 0) & (p <= 1)).all()
    ev = tiny.evaluate(lambda x: tiny.module(torch.from_numpy(x)).detach().numpy())
    assert ev.value == pytest.approx(auroc(p[s.test_labels == 1, 0], p[s.test_labels == 0, 0]))


def test_tiny_deploy_scores_fp32_like_torch_and_int8_close(tmp_path, tiny):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    plan = PlanOptions(tvm=False, variants=("fp32", "int8"))  # int4 builds like int8; two rows keep it quick
    out = deploy(DeployOptions("tsv-rwkv", "host-cpu", tmp_path / "r", plan=plan,
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    rows = {r["variant"]: r for r in report["results"]}
    ref = report["reference"]["evaluation"]["value"]
    assert rows["fp32"]["evaluation"]["value"] == pytest.approx(ref, abs=1e-6)
    assert rows["fp32"]["max_abs_diff"] < 1e-4
    # int8 is judged on the detector's probabilities, not on the AUROC: the tiny detector's 24 test scores are
    # near-tied (AUROC 0.31), so a 0.04 change in them moved the AUROC to 0.59 on an AVX-512 Xeon (VNNI int8
    # kernels) where the AVX2 EPYC stayed within 0.25
    assert 0.0 <= rows["int8"]["evaluation"]["value"] <= 1.0
    assert rows["int8"]["max_abs_diff"] < 0.1
