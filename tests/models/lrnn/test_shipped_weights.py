"""The denoiser weights that ship in models/weights/ cover what `edgesmith denoise` and `make demo` build, so
neither trains: an empty cache must load every model (dense, pruned, QAT) from the shipped files."""
from __future__ import annotations

import pytest

from edgesmith.bench.pipeline.deploy import source_artifact
from edgesmith.compress import PassContext, run_passes
from edgesmith.hardware import PlanOptions, get_target
from edgesmith.models import get_producer


@pytest.mark.slow
@pytest.mark.parametrize("target, model_options, options", [
    ("host-cpu", {}, {}),  # `edgesmith denoise` and the demo's host deploy: the default model and kind options
    ("loihi2", {"eval_clips": 6, "eval_clip_s": 0.5}, {}),  # the demo's Lava deploy: the default model, short clips
    ("loihi2", {"tiny": True}, {"prune_epochs": 1, "qat_epochs": 1}),  # the tiny model of the tests
])
def test_an_empty_cache_loads_every_denoiser_model_from_the_shipped_weights(tmp_path, monkeypatch, target,
                                                                             model_options, options):
    from edgesmith.common import cache_dir

    # no model in the cache; the speech data splits (synthesized, not trained) are shared with the other tests
    shared = cache_dir() / "lrnn-data"
    shared.mkdir(parents=True, exist_ok=True)
    (tmp_path / "lrnn-data").symlink_to(shared)
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    p = get_producer("lrnn-denoiser", **model_options).build()
    assert not hasattr(p, "history_"), "the dense model was trained, not loaded"
    plan = get_target(target).plan(p, PlanOptions(options=options, variants=["sparse-fixed"]))
    passes = [c for c in plan.variants[0].passes if c.kind in ("prune-lrnn", "qat-lrnn")]
    _, reports = run_passes(source_artifact(p), passes, PassContext(workdir=tmp_path, train_data=p.training_data()))
    assert [r.config["kind"] for r in reports] == ["prune-lrnn", "qat-lrnn"]
    assert all(r.extra["from_cache"] for r in reports), "a compressed model was trained, not loaded"
    assert not list((tmp_path / "models").glob("*.pt"))  # nothing was written: every model came from models/weights


def test_the_tiny_shipped_weights_retrain_byte_for_byte_or_to_float_rounding(tmp_path):
    # the reproduce command of models/weights/README.md, on the seconds-long model (the default takes ~25 min).
    # On the CPU kind that made the files the bytes are equal; on one whose float kernels differ (an AVX-512 Xeon)
    # every tensor still has to match to 1e-4 of its magnitude, which a changed recipe or seed would not.
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "edgesmith.bench.studies.denoiser_weights", "--cache",
                           str(tmp_path / "cache"), "--tiny-only"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    verdicts = [ln for ln in proc.stdout.splitlines() if " vs shipped " in ln]
    assert len(verdicts) == 3 and all("byte-identical" in v or "equal to float rounding" in v for v in verdicts)


def test_weights_that_differ_beyond_rounding_are_reported():
    import torch

    from edgesmith.bench.studies.denoiser_weights import largest_difference

    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3), "meta": {"epochs": 2}}
    assert largest_difference(a, {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3), "meta": {"epochs": 2}}) == 0
    assert largest_difference(a, {**a, "w": torch.tensor([1.0, 2.0 + 2e-6])}) == pytest.approx(1e-6, rel=0.1)  # float32
    assert largest_difference(a, {**a, "w": torch.tensor([1.0, 2.5])}) == pytest.approx(0.2)
    assert largest_difference(a, {**a, "meta": {"epochs": 3}}) == float("inf")  # a changed recipe
    assert largest_difference(a, {**a, "n": torch.tensor(4)}) == float("inf")
    assert largest_difference(a, {"w": a["w"]}) == float("inf")
