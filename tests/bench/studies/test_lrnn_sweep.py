"""LRNN sweep analysis: Pareto fronts and iso-accuracy ratios on hand-made points."""
from __future__ import annotations

import pytest

from edgesmith.bench.studies.lrnn_sweep import iso_accuracy, pareto


def _pt(width, sparsity, snr, macs, mem):
    return {"width": width, "sparsity": sparsity, "si_snr_db": snr, "effective_macs": macs, "memory_bytes": mem}


POINTS = [_pt(0.5, 0.0, 10.0, 100, 100), _pt(1.0, 0.0, 12.0, 400, 400), _pt(1.0, 0.9, 11.0, 50, 120),
          _pt(0.5, 0.9, 8.0, 20, 60), _pt(0.5, 0.5, 9.0, 80, 110)]


def test_pareto_front_drops_dominated_points():
    front = pareto(POINTS, "effective_macs")
    assert [(p["width"], p["sparsity"]) for p in front] == [(0.5, 0.9), (1.0, 0.9), (1.0, 0.0)]


def test_iso_accuracy_interpolates_the_dense_curve_in_log_cost():
    rows = iso_accuracy(POINTS)
    assert [(r["width"], r["sparsity"]) for r in rows] == [(1.0, 0.9)]  # the only sparse point in the dense range
    # 11 dB is halfway from 10 to 12 dB: geometric mean of 100 and 400 MACs
    assert rows[0]["dense_effective_macs_at_same_si_snr"] == pytest.approx(200.0)
    assert rows[0]["effective_macs_ratio_dense_over_sparse"] == pytest.approx(4.0)
    assert rows[0]["memory_bytes_ratio_dense_over_sparse"] == pytest.approx(200.0 / 120)
