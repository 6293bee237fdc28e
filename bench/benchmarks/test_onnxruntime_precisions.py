"""onnxruntime on digits-wide at fp32, int8 QDQ and int4 MatMulNBits, batch 1 and 64, 2 threads."""
from __future__ import annotations

import pytest

from edgesmith.runtimes import get_runtime

THREADS = 2


@pytest.mark.parametrize("batch", [1, 64])
@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_onnxruntime_run(benchmark, wide, wide_variants, precision_medians, precision, batch):
    rt = get_runtime("onnxruntime", threads=THREADS).load(wide_variants[precision])
    x = wide.example_inputs(batch)
    benchmark.group = f"onnxruntime digits-wide batch {batch}"
    benchmark.extra_info.update({"precision": precision, "batch": batch, "threads": THREADS})
    out = benchmark.pedantic(lambda: rt.run(x).outputs, warmup_rounds=20, rounds=200, iterations=1)
    assert out.shape == (batch, 10)
    if benchmark.stats is not None:  # None under --benchmark-disable
        precision_medians[(precision, batch)] = benchmark.stats.stats.median
