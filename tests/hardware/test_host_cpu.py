"""host-cpu: energy from op counts plus a TDP share of measured time; numbers checked by hand."""
from __future__ import annotations

import pytest

from edgesmith.hardware.base import Workload
from edgesmith.hardware.host_cpu import (
    HostCpu, HostCpuCostModel, cpu_identity, cpu_profile, last_level_cache_bytes, physical_memory_bytes,
)
from edgesmith.common import EdgesmithError

# 1e6 MACs, 1000 64-bit words of weights, 100 words of activations
WORK = Workload(macs=1e6, weight_bytes=8000, activation_bytes=800, precision="fp32", n_layers=2, batch=1)
# the hand computations below use the Genoa profile's figures, whatever CPU runs the test
GENOA = {"vendor": "AuthenticAMD", "family": 25, "model": 17, "model_name": "AMD EPYC"}
EMERALD_RAPIDS = {"vendor": "GenuineIntel", "family": 6, "model": 207, "model_name": "Intel(R) Xeon(R) Processor"}


def test_energy_with_measured_latency_matches_hand_computation():
    est = HostCpuCostModel(cores=2, cpu=GENOA).estimate(Workload(**{**WORK.to_dict(), "measured_latency_s": 1e-3}))
    compute = 1e6 * (3.7 + 0.9) * 1e-12
    weights = 1000 * 1300e-12
    acts = 100 * 20e-12
    static = 360 / 96 * 2 * 1e-3
    assert est.energy_j == pytest.approx(compute + weights + acts + static, rel=1e-12)
    assert est.breakdown["static_package_share_j"] == pytest.approx(7.5e-3)
    assert est.latency_s == 1e-3
    assert est.breakdown["latency_provenance"].startswith("measured")
    assert est.provenance == "estimated"  # the energy is modelled even when the time is measured


def test_latency_without_measurement_is_a_compute_bound_roofline():
    est = HostCpuCostModel(cores=2, cpu=GENOA).estimate(WORK)
    t_compute = 1e6 / (2 * 2.4e9 * 16)
    t_memory = 8800 / (460.8e9 * 2 / 96)
    assert est.latency_s == pytest.approx(t_compute)
    assert est.breakdown["roofline_memory_s"] == pytest.approx(t_memory)
    assert est.breakdown["bound"] == "compute"
    assert est.breakdown["latency_provenance"].startswith("estimated")
    assert {c.name for c in est.coefficients} >= {"base_clock_ghz", "dram_bandwidth_gbs"}


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_integer_macs_cost_an_int8_multiply_and_int32_add(precision):
    m = HostCpuCostModel(cores=1, cpu=GENOA)
    w = Workload(macs=1e6, precision=precision, measured_latency_s=1e-9)
    est = m.estimate(w)
    assert est.breakdown["dynamic_compute_j"] == pytest.approx(1e6 * 0.3e-12)


def test_batch_multiplies_compute_and_activations_but_not_weights():
    m = HostCpuCostModel(cores=1, cpu=GENOA)
    one = m.estimate(Workload(**{**WORK.to_dict(), "measured_latency_s": 1e-3}))
    four = m.estimate(Workload(**{**WORK.to_dict(), "batch": 4, "measured_latency_s": 1e-3}))
    assert four.breakdown["dynamic_compute_j"] == pytest.approx(4 * one.breakdown["dynamic_compute_j"])
    assert four.breakdown["dynamic_weight_dram_j"] == one.breakdown["dynamic_weight_dram_j"]
    assert four.breakdown["energy_per_sample_j"] == pytest.approx(four.energy_j / 4)


def test_bad_precision_or_latency_is_a_user_error():
    m = HostCpuCostModel(cores=1, cpu=GENOA)
    with pytest.raises(EdgesmithError, match="precision"):
        m.estimate(Workload(macs=1, precision="fp8"))
    with pytest.raises(EdgesmithError, match="positive"):
        m.estimate(Workload(macs=1, measured_latency_s=0.0))


def test_cpu_identity_reads_the_first_processor_block(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                 "model name\t: AMD EPYC 9654 96-Core Processor\n\nprocessor\t: 1\nmodel name\t: other\n")
    info = cpu_identity(str(f))
    assert (info["vendor"], info["family"], info["model"]) == ("AuthenticAMD", 25, 17)
    assert info["model_name"] == "AMD EPYC 9654 96-Core Processor"
    assert cpu_identity(str(tmp_path / "missing"))["model_name"] == "unknown"


def test_last_level_cache_is_the_highest_level_sysfs_lists(tmp_path):
    for i, (level, size) in enumerate([(1, "48K"), (2, "2048K"), (3, "307200K"), (1, "32K")]):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "level").write_text(f"{level}\n")
        (tmp_path / f"index{i}" / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(tmp_path) == 300 * 2**20
    assert last_level_cache_bytes(tmp_path / "absent") is None


def test_host_target_reports_this_machine():
    t = HostCpu()
    assert t.memory_budget_bytes == physical_memory_bytes() > 0
    d = t.describe()
    assert d["detected_cpu"]["model_name"] == cpu_identity()["model_name"]
    assert d["cost_profile"]["part"] == cpu_profile(cpu_identity())[0].part
    assert t.numeric_formats == ("fp32", "int8", "int4")
    assert (t.runtime, t.export_format) == ("onnxruntime", "onnx")


def test_an_emerald_rapids_xeon_is_costed_with_its_own_part_not_the_epycs():
    est = HostCpuCostModel(cores=2, cpu=EMERALD_RAPIDS).estimate(Workload(**{**WORK.to_dict(), "measured_latency_s": 1e-3}))
    assert est.breakdown["static_package_share_j"] == pytest.approx(350 / 60 * 2 * 1e-3)
    assert "Xeon Platinum 8580" in est.breakdown["assumptions"]
    tdp = next(c for c in est.coefficients if c.name == "package_tdp_w")
    assert "ark.intel.com" in tdp.source and "EPYC" not in tdp.source
    roof = HostCpuCostModel(cores=2, cpu=EMERALD_RAPIDS).estimate(WORK)
    assert roof.latency_s == pytest.approx(1e6 / (2 * 2.0e9 * 32))  # two 512-bit FMA ports per core
    assert roof.breakdown["roofline_memory_s"] == pytest.approx(8800 / (358.4e9 * 2 / 60))


def test_a_cpu_no_profile_matches_is_costed_with_a_stand_in_that_the_estimate_names():
    other = {"vendor": "GenuineIntel", "family": 6, "model": 85, "model_name": "Intel(R) Xeon(R) Gold 6126"}
    profile, assumption = cpu_profile(other)
    assert profile.part == "AMD EPYC 9654"
    assert "no coefficient profile matches this CPU (Intel(R) Xeon(R) Gold 6126" in assumption
    est = HostCpuCostModel(cores=1, cpu=other).estimate(Workload(macs=1, measured_latency_s=1e-6))
    assert est.breakdown["assumptions"].startswith("no coefficient profile matches")
    assert cpu_profile(GENOA)[1].startswith("assumed SKU")
