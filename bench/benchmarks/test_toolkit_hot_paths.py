"""The toolkit's own hot paths: ONNX export, int8 and int4 quantization, and the timing loop's overhead."""
from __future__ import annotations

import numpy as np

from edgesmith.bench.measure.latency import measure_latency
from edgesmith.compress import Artifact, apply_pass
from edgesmith.compress.export_onnx import ExportOnnxConfig
from edgesmith.compress.quant_int4 import Int4WeightOnlyConfig
from edgesmith.compress.quant_int8 import Int8QdqConfig
from edgesmith.runtimes.base import Runtime

LOOP_REPS = 1000


def test_export_onnx_pass(benchmark, wide_torch, wide_ctx):
    res = benchmark.pedantic(apply_pass, args=(wide_torch, ExportOnnxConfig(), wide_ctx), rounds=5, iterations=1)
    assert res.artifact.format == "onnx"


def test_int8_qdq_pass(benchmark, wide_variants, wide_ctx):
    res = benchmark.pedantic(apply_pass, args=(wide_variants["fp32"], Int8QdqConfig(), wide_ctx), rounds=3,
                             iterations=1)
    assert res.artifact.meta["precision"] == "int8"


def test_int4_weight_only_pass(benchmark, wide_variants, wide_ctx):
    res = benchmark.pedantic(apply_pass, args=(wide_variants["fp32"], Int4WeightOnlyConfig(), wide_ctx), rounds=3,
                             iterations=1)
    assert res.artifact.meta["precision"] == "int4"


class NoWork(Runtime):
    """Returns its input: what is left to time is run()'s checks plus the timing loop itself."""

    name = "no-work"
    formats = ("onnx",)

    def _load(self, artifact):
        pass

    def _run(self, x):
        return x, {}


def test_measure_latency_overhead_per_call(benchmark, tmp_path):
    path = tmp_path / "unused.onnx"
    path.write_bytes(b"never read by NoWork")
    rt = NoWork().load(Artifact("onnx", path=path, meta={"input_shape": [64]}))
    x = np.zeros((1, 64), np.float32)
    benchmark.extra_info["calls_per_round"] = LOOP_REPS
    stats = benchmark.pedantic(measure_latency, args=(rt, x), kwargs={"warmup": 0, "reps": LOOP_REPS}, rounds=20,
                               iterations=1)
    # the loop's own floor: a no-op run() must time far below the microsecond-scale figures reported
    assert stats.n == LOOP_REPS and stats.p50 < 1e-3
    if benchmark.stats is not None:
        benchmark.extra_info["per_call_overhead_s"] = benchmark.stats.stats.median / LOOP_REPS
