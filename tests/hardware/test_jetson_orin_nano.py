"""jetson-orin-nano: roofline + launch overhead, energy = power mode x latency; checked by hand."""
from __future__ import annotations

import pytest

from edgesmith.hardware.base import Workload
from edgesmith.hardware.jetson_orin_nano import JetsonOrinNano, JetsonOrinNanoCostModel
from edgesmith.common import EdgesmithError


def test_fp32_estimate_matches_hand_computation():
    # 6.4e8 MACs at 1024 cores x 625 MHz = 1 ms; 6.8 MB at 68 GB/s = 0.1 ms; 2 launches of 5 us
    est = JetsonOrinNanoCostModel().estimate(Workload(macs=6.4e8, weight_bytes=6.8e6, n_layers=2))
    assert est.breakdown["compute_s"] == pytest.approx(1e-3)
    assert est.breakdown["memory_s"] == pytest.approx(1e-4)
    assert est.latency_s == pytest.approx(1e-3 + 1e-5)
    assert est.energy_j == pytest.approx(15.0 * (1e-3 + 1e-5))
    assert est.breakdown["bound"] == "compute"
    assert est.provenance == "estimated"


def test_roofline_switches_from_memory_to_compute_bound_at_the_ridge_point():
    m = JetsonOrinNanoCostModel()
    bytes_moved = 68e6  # 1 ms at 68 GB/s
    ridge_macs = 10e12 * 1e-3  # int8: the MAC count that also takes 1 ms
    below = m.estimate(Workload(macs=0.5 * ridge_macs, weight_bytes=bytes_moved, precision="int8"))
    above = m.estimate(Workload(macs=2.0 * ridge_macs, weight_bytes=bytes_moved, precision="int8"))
    assert below.breakdown["bound"] == "memory" and below.latency_s == pytest.approx(1e-3)
    assert above.breakdown["bound"] == "compute" and above.latency_s == pytest.approx(2e-3)


def test_lower_precision_is_faster_on_compute_bound_work():
    m = JetsonOrinNanoCostModel()
    t = {p: m.estimate(Workload(macs=1e10, precision=p)).latency_s for p in ("fp32", "fp16", "int8")}
    assert t["fp32"] > t["fp16"] > t["int8"]


def test_launch_overhead_scales_with_layers():
    m = JetsonOrinNanoCostModel()
    assert m.estimate(Workload(n_layers=10)).latency_s == pytest.approx(10 * 5e-6)


def test_unsupported_precision_is_a_user_error():
    with pytest.raises(EdgesmithError, match="int4"):
        JetsonOrinNanoCostModel().estimate(Workload(macs=1, precision="int4"))


def test_target_facts():
    t = JetsonOrinNano()
    assert t.memory_budget_bytes == 8 * 2**30
    assert t.numeric_formats == ("fp32", "fp16", "int8")
    assert "proxy" in t.description
