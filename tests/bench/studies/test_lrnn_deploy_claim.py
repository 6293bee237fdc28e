"""The sparse-LRNN paper-claim script (bench/studies/lrnn_deploy.py): its quick run builds the pruned
and QAT models through the prune-lrnn / qat-lrnn passes and checks Lava against the Numba reference."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies.lrnn_deploy import LrnnPlan, deploy_lrnn
from edgesmith.common import EdgesmithError


@pytest.mark.lava
@pytest.mark.slow
def test_quick_claim_run_matches_lava_to_the_reference_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "lrnn"
    deploy_lrnn(out, LrnnPlan(quick=True, sweep=False, lava_clips=1), log=lambda *a, **k: None)
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").is_file()
    assert report["bit_exact"]["max_abs_difference"] == 0 and report["bit_exact"]["clips"] == 1
    assert 0.8 < report["sparsity"]["weights"] < 0.95
    assert "estimated" in json.dumps(report["hardware"])
    # every Lava process placed on cores of its own, from the run's per-layer counts
    bd = report["hardware"]["loihi2"]["estimate"]["breakdown"]
    assert bd["placement_source"].startswith("per-layer") and bd["cores_used"] == len(bd["placement"]) >= 3
    # the NIR graph of the whole float model, read back, reproduces it
    assert (out / "model.nir").is_file() and report["nir"]["read_back_max_abs_diff_vs_model"] < 1e-3
    # the dense ends as netx networks lava-dl loads, bit-exact in Lava
    for part in ("encoder", "decoder"):
        assert (out / f"{part}.net").is_file() and report["netx"][part]["lava_vs_reference_max_abs_diff"] == 0
    with pytest.raises(EdgesmithError, match="already exists"):
        deploy_lrnn(out, LrnnPlan(quick=True, sweep=False, lava_clips=1))
