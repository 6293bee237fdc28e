"""Latency statistics, the timing loop and the fresh-process measurement path."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import edgesmith.bench.measure.latency as latency
from edgesmith.bench.measure.latency import LatencyStats, measure_isolated, measure_latency, outputs_checksum
from edgesmith.compress import Artifact
from edgesmith.common import EdgesmithError
from edgesmith.runtimes import get_runtime
from edgesmith.runtimes.base import Runtime


class FakeClock:
    """A perf_counter_ns that only moves when the fake runtime 'computes'."""

    def __init__(self):
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


class SteppingRuntime(Runtime):
    """Each run() advances the fake clock by the next duration of a script (not registered)."""

    name = "stepping"
    formats = ("onnx",)

    def __init__(self, clock: FakeClock, durations_ns: list[int], **kw):
        super().__init__(**kw)
        self.clock, self.durations_ns, self.calls = clock, list(durations_ns), 0

    def _load(self, artifact):
        pass

    def _run(self, x):
        self.clock.now_ns += self.durations_ns[self.calls % len(self.durations_ns)]
        self.calls += 1
        return x[:, :1], {}


@pytest.fixture
def fake_clock(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(latency.time, "perf_counter_ns", clock)
    return clock


def _loaded(runtime: Runtime, tmp_path) -> Runtime:
    path = tmp_path / "placeholder.onnx"
    path.write_bytes(b"unused by the fake runtime")
    return runtime.load(Artifact("onnx", path=path, meta={"input_shape": [4]}))


def test_percentiles_and_spread_of_known_samples():
    samples = np.arange(1, 101) * 1e-3  # 1 ms .. 100 ms
    s = LatencyStats.from_samples(samples, warmup=3, threads=2, batch=8, runtime="x", method="m")
    assert s.n == 100 and s.warmup == 3 and s.threads == 2 and s.batch == 8
    assert s.p50 == pytest.approx(50.5e-3)
    assert s.p90 == pytest.approx(90.1e-3)
    assert s.p99 == pytest.approx(99.01e-3)
    assert s.iqr == pytest.approx(75.25e-3 - 25.75e-3)
    assert (s.min, s.max) == pytest.approx((1e-3, 100e-3))
    assert s.mean == pytest.approx(50.5e-3)
    assert s.std == pytest.approx(np.std(samples, ddof=1))
    assert s.cv == pytest.approx(s.std / s.mean)
    assert s.p50_per_sample == pytest.approx(50.5e-3 / 8)


def test_single_sample_has_zero_spread():
    s = LatencyStats.from_samples([2e-3], warmup=0, threads=None, batch=1, runtime="x", method="m")
    assert (s.p50, s.p99, s.std, s.iqr, s.cv) == (2e-3, 2e-3, 0.0, 0.0, 0.0)


def test_stats_round_trip_through_json():
    s = LatencyStats.from_samples([1e-3, 3e-3, 2e-3], warmup=1, threads=1, batch=4, runtime="r", method="m")
    again = LatencyStats.from_dict(json.loads(json.dumps(s.to_dict())))
    assert again == s
    assert "samples_s" not in s.to_dict(samples=False)


def test_measure_latency_records_each_timed_call_and_excludes_warmup(fake_clock, tmp_path):
    # warm-up calls take 1 s each; if any leaked into the samples the max would show it
    durations = [1_000_000_000] * 5 + [1_000_000, 2_000_000, 3_000_000, 4_000_000] * 2
    rt = _loaded(SteppingRuntime(fake_clock, durations, threads=3), tmp_path)
    s = measure_latency(rt, np.zeros((2, 4), np.float32), warmup=5, reps=8)
    assert rt.calls == 13
    assert s.samples_s == pytest.approx([1e-3, 2e-3, 3e-3, 4e-3] * 2)
    assert s.max == pytest.approx(4e-3) and s.p50 == pytest.approx(2.5e-3)
    assert (s.n, s.warmup, s.threads, s.batch, s.runtime) == (8, 5, 3, 2, "stepping")
    assert "perf_counter_ns" in s.method and "in-process" in s.method


def test_min_time_keeps_timing_past_reps_until_the_budget_is_spent(fake_clock, tmp_path):
    rt = _loaded(SteppingRuntime(fake_clock, [10_000_000]), tmp_path)  # 10 ms per call
    s = measure_latency(rt, np.zeros((1, 4), np.float32), warmup=0, reps=3, min_time_s=0.1)
    assert s.n == 10


def test_timing_stops_once_the_p50_is_known_to_the_precision_asked(fake_clock, tmp_path):
    # calls of 10 ms +- 1%: the median's interval is within 3% long before 200 calls
    steady = [10_000_000 + d for d in (-100_000, 0, 100_000, 50_000, -50_000)]
    rt = _loaded(SteppingRuntime(fake_clock, steady), tmp_path)
    s = measure_latency(rt, np.zeros((1, 4), np.float32), warmup=0, reps=200, precision=0.03)
    assert s.n == latency.MIN_CALLS_FOR_PRECISION and s.p50 == pytest.approx(10e-3, rel=0.01)
    # calls that alternate between 5 and 15 ms never pin the median to 3%: every call asked for is timed
    noisy = _loaded(SteppingRuntime(fake_clock, [5_000_000, 15_000_000]), tmp_path)
    assert measure_latency(noisy, np.zeros((1, 4), np.float32), warmup=0, reps=60, precision=0.03).n == 60
    # precision 0 (the default of the function) times exactly reps calls
    assert measure_latency(rt, np.zeros((1, 4), np.float32), warmup=0, reps=50).n == 50


def test_slow_calls_with_a_precision_goal_are_timed_for_a_bounded_time(fake_clock, tmp_path):
    # 1-second calls that never pin the median (0.5 s / 1.5 s alternating): warm-up stops after 2 s of calls, timing
    # once the budget is spent and enough calls are in, instead of 20 + 200 calls (a large batch of a big model)
    rt = _loaded(SteppingRuntime(fake_clock, [500_000_000, 1_500_000_000]), tmp_path)
    s = measure_latency(rt, np.zeros((1, 4), np.float32), warmup=20, reps=200, precision=0.03)
    assert s.warmup == 2 and rt.calls == 2 + s.n
    assert latency.MIN_BUDGETED <= s.n <= latency.MIN_BUDGETED + 2
    assert latency.PRECISION_BUDGET_S <= sum(s.samples_s) < latency.PRECISION_BUDGET_S + 1.5
    # without a precision goal every call asked for still runs
    rt = _loaded(SteppingRuntime(fake_clock, [500_000_000, 1_500_000_000]), tmp_path)
    assert measure_latency(rt, np.zeros((1, 4), np.float32), warmup=3, reps=12).n == 12 and rt.calls == 15


def test_the_median_interval_covers_the_median_and_narrows_with_more_calls():
    rng = np.random.default_rng(0)
    x = rng.lognormal(0, 0.2, 400)
    lo, hi = latency.median_interval(x[:40])
    lo2, hi2 = latency.median_interval(x)
    assert lo <= np.median(x[:40]) <= hi and lo2 <= np.median(x) <= hi2 and hi2 - lo2 < hi - lo


@pytest.mark.parametrize("precision", [-0.1, 1.0, True, "3%"])
def test_a_bad_precision_is_a_user_error(precision, fake_clock, tmp_path):
    rt = _loaded(SteppingRuntime(fake_clock, [1]), tmp_path)
    with pytest.raises(EdgesmithError, match="latency precision"):
        measure_latency(rt, np.zeros((1, 4), np.float32), precision=precision)


@pytest.mark.parametrize("kw", [{"reps": 0}, {"warmup": -1}, {"min_time_s": -1.0}, {"reps": 2.5}])
def test_bad_counts_are_user_errors(kw, fake_clock, tmp_path):
    rt = _loaded(SteppingRuntime(fake_clock, [1]), tmp_path)
    with pytest.raises(EdgesmithError):
        measure_latency(rt, np.zeros((1, 4), np.float32), **kw)


def test_unloaded_runtime_and_empty_batch_are_user_errors(fake_clock, tmp_path):
    with pytest.raises(EdgesmithError, match="no model loaded"):
        measure_latency(SteppingRuntime(fake_clock, [1]), np.zeros((1, 4), np.float32))
    rt = _loaded(SteppingRuntime(fake_clock, [1]), tmp_path)
    with pytest.raises(EdgesmithError, match="batch"):
        measure_latency(rt, np.zeros((0, 4), np.float32))


def test_isolated_onnx_measurement_is_sane_and_matches_in_process_outputs(digits, digits_onnx):
    x = digits.example_inputs(16)
    res = measure_isolated("onnxruntime", digits_onnx, x, threads=1, warmup=5, reps=40)
    s = res.latency
    assert res.isolated and "fresh process" in s.method
    assert (s.n, s.warmup, s.threads, s.batch, s.runtime) == (40, 5, 1, 16, "onnxruntime")
    assert len(s.samples_s) == 40 and min(s.samples_s) > 0
    assert 0 < s.min <= s.p50 <= s.p90 <= s.p99 <= s.max < 1.0
    m = res.memory
    assert m.artifact_size_bytes == digits_onnx.size_bytes()
    assert 0 < m.rss_before_load_bytes <= m.peak_rss_bytes and m.rss_after_load_bytes <= m.peak_rss_bytes
    in_process = get_runtime("onnxruntime", threads=1).load(digits_onnx).run(x).outputs
    assert res.outputs_sha256 == outputs_checksum(in_process)
    row = json.loads(json.dumps(res.to_dict()))  # one flat, JSON-ready report row
    assert row["p50"] == s.p50 and row["peak_rss_bytes"] == m.peak_rss_bytes and len(row["samples_s"]) == 40


def test_isolated_torch_module_runs_as_an_exported_program(digits, digits_torch):
    x = digits.example_inputs(4)
    res = measure_isolated("torch", digits_torch, x, threads=1, warmup=2, reps=10)
    assert res.isolated and "torch.export program" in res.latency.method
    assert res.memory.artifact_size_bytes == digits_torch.size_bytes()
    with torch.inference_mode():
        expected = digits.module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(res.outputs, expected, rtol=1e-5, atol=1e-5)


class NumpyInside(nn.Module):
    """torch.export cannot trace a round trip through NumPy."""

    def forward(self, x):
        return torch.from_numpy(x.numpy() * 2.0)


def test_unexportable_module_is_measured_in_process_and_says_so():
    art = Artifact("torch", module=NumpyInside(), meta={"input_shape": [3]})
    res = measure_isolated("torch", art, np.ones((2, 3), np.float32), threads=1, warmup=1, reps=5)
    assert not res.isolated and not res.memory.isolated
    assert "torch.export failed" in res.latency.method and "in-process" in res.latency.method
    np.testing.assert_array_equal(res.outputs, np.full((2, 3), 2.0, np.float32))


def test_corrupt_onnx_gives_a_user_error_from_the_worker(tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf model" * 10)
    art = Artifact("onnx", path=bad, meta={"input_shape": [64]})
    with pytest.raises(EdgesmithError, match="onnxruntime could not load") as err:
        measure_isolated("onnxruntime", art, np.zeros((1, 64), np.float32), threads=1, warmup=0, reps=1)
    assert err.value.fix


def test_worker_crash_reports_the_last_stderr_line(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps({"threads": 1}))  # no "runtime": the worker dies with KeyError
    np.savez(tmp_path / "inputs.npz", **{"": np.zeros((1, 4), np.float32)})
    with pytest.raises(EdgesmithError, match=r"exit code 1\): KeyError: 'runtime'"):
        latency._run_worker(tmp_path, 1, 120, "a broken spec")


def test_isolated_rejects_bad_threads_before_starting_a_process(digits_onnx):
    with pytest.raises(EdgesmithError, match="threads"):
        measure_isolated("onnxruntime", digits_onnx, np.zeros((1, 64), np.float32), threads=0)


def test_several_batch_sizes_are_timed_in_one_fresh_process_each_with_its_own_figures(digits_onnx):
    from edgesmith.bench.measure.latency import measure_isolated_sets

    sets = [np.zeros((1, 64), np.float32), np.zeros((64, 64), np.float32)]
    small, large = measure_isolated_sets("onnxruntime", digits_onnx, sets, threads=1, warmup=2, reps=10)
    assert small.outputs.shape == (1, 10) and large.outputs.shape == (64, 10)
    assert small.latency.batch == 1 and large.latency.batch == 64
    # one process: the same load, and peaks that only grow as batches are timed smallest first
    assert small.memory.rss_after_load_bytes == large.memory.rss_after_load_bytes
    assert small.memory.peak_rss_bytes <= large.memory.peak_rss_bytes
