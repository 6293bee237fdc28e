"""PTQ vs brevitas QAT benchmark (quick: tiny producer, briefly trained architectures): every row scored."""
from __future__ import annotations

import numpy as np

from edgesmith.bench.studies import qat_vs_ptq as Q


def test_every_case_gets_ptq_and_qat_rows_with_accuracy_latency_and_seeds(tmp_path):
    cases = Q._architecture_cases(quick=True)
    rows = []
    for case in cases[:1]:  # the ResNet: convolutions stay QCDQ, its classifier head is lowered
        rows += Q.case_rows(case, epochs=1, seeds=2, workdir=tmp_path, reps=3)
    assert [r["variant"] for r in rows] == list(Q.VARIANTS)
    for r in rows:
        assert r["metric"] == "accuracy" and 0.0 <= r["value"] <= 1.0 and r["p50_s"] > 0
        if r["variant"].startswith("qat"):
            assert len(r["values"]) == 2 and r["sd"] is not None and r["fine_tune_s"] > 0
            assert r["bits_per_weight"] in (4.0, 8.0)
        if r["variant"].startswith(("qat", "ptq")):
            assert r["export"]["form"] == "ort-integer" and r["export"]["integer_gemms"] >= 1
    md = Q.markdown(rows, 1, 2)
    assert "| hf-resnet | qat-w4a8 |" in md and " ± " in md and "- hf-resnet:" in md


def test_the_architectures_learn_the_digits_in_a_few_epochs():
    # The accuracy columns mean something only if the public models are trained, not random
    xtr, xte, ytr, yte = Q._digit_images()
    module, _ = Q._architectures(quick=True)["hf-resnet"]
    Q.train_classifier(module, xtr, ytr, epochs=3)
    import torch

    with torch.no_grad():
        acc = float((module(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean())
    assert acc > 0.5  # chance is 0.1


def test_goal_reads_losses_in_points_against_fp32():
    rows = [{"model": "m", "metric": "accuracy", "variant": v, "value": val}
            for v, val in (("fp32", 0.97), ("int4", 0.96), ("ptq-w4a8", 0.95), ("qat-w4a8", 0.968))]
    g = Q.goal(rows)["m"]
    assert np.isclose(g["loss_points"]["ptq-w4a8"], 2.0) and g["qat_within_0.5"] and g["goal_case_met"]
    rows[-1]["value"] = 0.90
    assert not Q.goal(rows)["m"]["goal_case_met"]


def test_the_portable_qcdq_file_runs_in_tvm_with_the_accuracy_onnxruntime_gives(tmp_path):
    case = Q._producer_case("digits-mlp", quick=False)
    rows = Q.case_rows(case, epochs=1, seeds=1, workdir=tmp_path, reps=3, tvm=True, only=("qat-w8a8", Q.TVM_VARIANT))
    by = {r["variant"]: r for r in rows}
    assert by[Q.TVM_VARIANT]["runtime"] == "tvm" and by[Q.TVM_VARIANT]["export"]["form"] == "qcdq"
    # same seed, same fine-tuning: the two files differ only in how the Linear layers are computed
    assert abs(by[Q.TVM_VARIANT]["value"] - by["qat-w8a8"]["value"]) <= 0.006
