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


def _layer(name, neurons, synapses, synops, dense=None, updates=None, messages=0.0):
    return {"name": name, "neurons": float(neurons), "synapses": float(synapses),
            "dense_synapses": float(dense if dense is not None else synapses), "synops": float(synops),
            "neuron_updates": float(updates if updates is not None else neurons), "messages": float(messages)}


def _layered(*layers, steps=1):
    return Workload(synops=sum(p["synops"] for p in layers), neuron_updates=sum(p["neuron_updates"] for p in layers),
                    messages=sum(p["messages"] for p in layers), timesteps=steps, precision="fixed",
                    weight_bytes=sum(p["dense_synapses"] for p in layers), layers=tuple(layers))


def test_each_layer_gets_its_own_cores_and_the_busiest_sets_the_pace():
    # two small layers: one core each, running in parallel, so compute time is the larger one's, not the sum
    m = Loihi2CostModel()
    est = m.estimate(_layered(_layer("a", 100, 1000, 4e5), _layer("b", 10, 100, 1e5)))
    assert est.breakdown["cores_used"] == 2
    assert est.breakdown["busiest_core_layer"] == "a"
    assert est.breakdown["compute_s"] == pytest.approx(4e5 * 3.5e-9 + 100 * 8.4e-9)


def test_a_layer_over_one_cores_memory_is_split_evenly():
    # 400k dense 8-bit synapses + 100 x 12 B of state = 401,200 B -> 3 cores of 192 KB, each doing a third
    m = Loihi2CostModel()
    big = _layer("big", 100, 400_000, 9e5)
    est = m.estimate(_layered(big))
    place = est.breakdown["placement"][0]
    assert place["cores"] == 3
    assert place["memory_bytes_per_core"] == pytest.approx((400_000 + 1200) / 3, abs=1)
    assert est.breakdown["compute_s"] == pytest.approx((9e5 * 3.5e-9 + 100 * 8.4e-9) / 3)


def test_sparse_storage_is_used_when_smaller():
    # 10% nonzero: 2 B x 40k = 80 kB sparse beats 400 kB dense, so the layer fits one core
    m = Loihi2CostModel()
    est = m.estimate(_layered(_layer("sparse", 100, 40_000, 1e5, dense=400_000)))
    assert est.breakdown["placement"][0]["cores"] == 1


def test_neuron_count_alone_can_need_more_cores():
    m = Loihi2CostModel()
    est = m.estimate(_layered(_layer("wide", 20_000, 20_000, 1e4)))
    assert est.breakdown["placement"][0]["cores"] == 3  # ceil(20,000 / 8,192)


def test_layers_that_need_more_than_128_cores_are_refused_with_the_per_layer_count():
    m = Loihi2CostModel()
    huge = _layer("huge", 100, 200 * CORE_MEMORY_BYTES, 1e5)
    with pytest.raises(EdgesmithError, match="huge: 2"):
        m.estimate(_layered(huge))


def test_per_layer_counts_come_from_activity_statistics():
    from edgesmith.hardware.workload import scale_activity, workload_from_activity

    stats = {"synops": 40.0, "neuron_updates": 20.0, "messages": 10.0, "timesteps": 4,
             "per_layer": [_layer("x", 5, 50, 40, updates=20, messages=10)]}
    work = workload_from_activity(scale_activity(stats, 2), weight_bytes=50)
    assert work.layers[0]["synops"] == 20 and work.layers[0]["neurons"] == 5  # counts per sample, sizes kept
    # a partial description would misplace the rest: the whole network is then one layer
    stats["per_layer"] = [{"name": "x", "synops": 40}]
    assert workload_from_activity(stats, weight_bytes=50).layers == ()
