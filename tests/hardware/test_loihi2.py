"""loihi2: energy and time from activity counts with Loihi 1 per-event figures; checked by hand."""
from __future__ import annotations

import pytest

from edgesmith.hardware.base import Workload
from edgesmith.hardware.loihi2 import CORE_MEMORY_BYTES, Loihi2, Loihi2CostModel
from edgesmith.common import EdgesmithError


def _work(synops=1e6, updates=1e4, messages=1e3, steps=10, weight_bytes=100):
    return Workload(synops=synops, neuron_updates=updates, messages=messages, timesteps=steps,
                    weight_bytes=weight_bytes, precision="fixed")


def test_estimate_matches_hand_computation():
    est = Loihi2CostModel().estimate(_work())
    latency = 10 * 465e-9 + (1e6 * 3.5e-9 + 1e4 * 8.4e-9)  # one core: no parallel speed-up
    dynamic = 1e6 * 23.6e-12 + 1e4 * 81e-12 + 1e3 * 1.7e-12
    assert est.latency_s == pytest.approx(latency)
    assert est.energy_j == pytest.approx(dynamic + 1.0 / 128 * latency)
    assert est.breakdown["cores_used"] == 1
    assert "Loihi 1" in est.breakdown["note"]


def test_energy_is_linear_in_synops():
    m = Loihi2CostModel()
    e = [m.estimate(_work(synops=s)).energy_j for s in (1e5, 2e5, 3e5, 4e5)]
    steps = [b - a for a, b in zip(e, e[1:])]
    assert steps[0] == pytest.approx(steps[1]) == pytest.approx(steps[2])
    per_synop = 23.6e-12 + 1.0 / 128 * 3.5e-9  # dynamic energy plus the static share of its time
    assert steps[0] == pytest.approx(1e5 * per_synop)
    syn = [m.estimate(_work(synops=s)).breakdown["synop_j"] for s in (1e5, 2e5)]
    assert syn[1] == pytest.approx(2 * syn[0])


def test_weights_spread_over_cores_shorten_compute_time():
    m = Loihi2CostModel()
    one = m.estimate(_work(weight_bytes=CORE_MEMORY_BYTES))
    four = m.estimate(_work(weight_bytes=3 * CORE_MEMORY_BYTES + 1))
    assert four.breakdown["cores_used"] == 4
    assert four.breakdown["compute_s"] == pytest.approx(one.breakdown["compute_s"] / 4)


def test_barrier_sync_is_paid_every_step():
    m = Loihi2CostModel()
    idle = m.estimate(_work(synops=0, updates=0, messages=0, steps=1000))
    assert idle.latency_s == pytest.approx(1000 * 465e-9)
    assert idle.breakdown["time_per_step_s"] == pytest.approx(465e-9)


def test_network_larger_than_a_chip_is_a_user_error():
    with pytest.raises(EdgesmithError, match="one Loihi 2 chip"):
        Loihi2CostModel().estimate(_work(weight_bytes=128 * CORE_MEMORY_BYTES + 1))


def test_non_fixed_point_workload_is_a_user_error():
    with pytest.raises(EdgesmithError, match="fixed-point"):
        Loihi2CostModel().estimate(Workload(macs=10, precision="fp32"))


def test_target_facts():
    t = Loihi2()
    assert t.memory_budget_bytes == 128 * 192 * 1024
    assert (t.numeric_formats, t.runtime, t.export_format) == (("fixed",), "lava", "netx")


def test_a_batch_streams_sample_after_sample_so_cost_scales_with_batch():
    from edgesmith.hardware import Workload, get_target

    model = get_target("loihi2").cost_model
    one = model.estimate(Workload(precision="fixed", synops=1e4, neuron_updates=800, messages=200, timesteps=4,
                                  weight_bytes=24_000, batch=1))
    eight = model.estimate(Workload(precision="fixed", synops=1e4, neuron_updates=800, messages=200, timesteps=4,
                                    weight_bytes=24_000, batch=8))
    assert eight.latency_s == pytest.approx(8 * one.latency_s)
    assert eight.energy_j == pytest.approx(8 * one.energy_j)
