"""PTQ vs brevitas QAT benchmark on public architectures (small images, one epoch): every row scored."""
from __future__ import annotations

import numpy as np

from edgesmith.bench.benchmarks import qat_vs_ptq as Q


def test_every_architecture_gets_ptq_and_qat_rows_scored_against_fp32(tmp_path):
    rows = Q.architecture_rows(epochs=1, quick=True, workdir=tmp_path, reps=3)
    assert {(r["model"], r["variant"]) for r in rows} == {(m, v) for m in ("hf-resnet", "hf-vit")
                                                          for v in ("fp32", "int8", "int4", "qat-w8a8", "qat-w4a8")}
    for r in rows:
        assert np.isfinite(r["value"]) and r["p50_s"] > 0
        if r["variant"] == "fp32":
            assert r["value"] > 60  # the exported fp32 graph is the torch model up to float rounding
        if r["variant"].startswith("qat"):
            assert r["fine_tune_s"] > 0 and r["bits_per_weight"] in (4.0, 8.0)
    md = Q.markdown(rows, 1)
    assert "| hf-vit | qat-w4a8 |" in md
