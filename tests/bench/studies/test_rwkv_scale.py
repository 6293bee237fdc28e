"""The 0.1B-shape quantization benchmark (bench/studies/rwkv_scale.py) at toy size: every method in its own
process, wall time and the kernel's peak-memory figure per method, and a failing method named clearly."""
from __future__ import annotations

import json

import pytest

from edgesmith.common import EdgesmithError

TOY = ["--n-layer", "1", "--n-embd", "64", "--vocab", "65536", "--n-calibration", "4", "--seq-len", "32"]


def test_scale_benchmark_times_each_method_in_a_fresh_process(tmp_path):
    from edgesmith.bench.studies.rwkv_scale import main

    assert main([*TOY, "--methods", "rwkv-rtn", "rwkvquant", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "scale.json").read_text())
    assert result["checkpoint"]["vocab_size"] == 65536 and result["checkpoint"]["file_bytes"] > 0
    rows = {r["method"]: r for r in result["rows"]}
    assert set(rows) == {"rwkv-rtn", "rwkvquant"}
    for r in rows.values():
        assert r["tokenizer"] == "world" and r["calibration_tokens"] == 4 * 32
        assert r["wall_s"] > sum(r["phase_s"].values()) > 0  # the parent's clock encloses the child's phases
        # the child loaded torch and a model: its own peak RSS, not the parent's, is tens of MiB at least
        assert 50 * 2**20 < r["peak_rss_bytes"] < 8 * 2**30
        assert 3.0 < r["bits_per_weight"] < 3.6
    assert "| rwkvquant | one fp pass | 3 |" in (tmp_path / "scale.md").read_text()


def test_sequential_calibration_reaches_the_methods_process(tmp_path):
    from edgesmith.bench.studies.rwkv_scale import main

    assert main([*TOY, "--n-layer", "2", "--methods", "rwkv-gptq", "--sequential", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "scale.json").read_text())["rows"]
    assert row["calibration"] == "block-sequential"
    assert "| rwkv-gptq | block-sequential | 3 |" in (tmp_path / "scale.md").read_text()


def test_a_method_that_fails_in_its_process_is_one_error_naming_it(tmp_path):
    from edgesmith.bench.studies.rwkv_scale import main

    with pytest.raises(EdgesmithError, match="rwkv-gptq failed: .*bits"):
        main([*TOY, "--methods", "rwkv-gptq", "--bits", "7", "--out", str(tmp_path)])
    assert not (tmp_path / "scale.json").exists()
