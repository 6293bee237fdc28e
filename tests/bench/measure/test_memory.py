"""Artifact sizes on disk and the process memory readings."""
from __future__ import annotations

import json

import onnx

from edgesmith.bench.measure.memory import MemoryStats, artifact_size_bytes, current_rss_bytes, peak_rss_bytes
from edgesmith.compress import Artifact


def test_onnx_artifact_size_is_its_file_size(digits_onnx):
    assert artifact_size_bytes(digits_onnx) == digits_onnx.path.stat().st_size


def test_onnx_size_includes_external_weight_files(digits_onnx, tmp_path):
    model = onnx.load(str(digits_onnx.path))
    path = tmp_path / "external.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="external.onnx.data", size_threshold=0)
    graph_only = path.stat().st_size
    data = (tmp_path / "external.onnx.data").stat().st_size
    assert data > 30_000  # the digits weights moved out of the graph file
    assert artifact_size_bytes(Artifact("onnx", path=path)) == graph_only + data


def test_torch_artifact_size_is_parameter_bytes(digits_torch):
    n_params = sum(p.numel() for p in digits_torch.module.parameters())
    assert artifact_size_bytes(digits_torch) == 4 * n_params


def test_peak_rss_is_at_least_current_rss_while_a_big_array_is_alive():
    import mmap

    before = current_rss_bytes()
    # 64 MiB of fresh anonymous pages, every one touched: an allocator (malloc, or one a library loaded) may hand
    # back memory it kept resident after an earlier test, which would not grow the RSS at all
    block = mmap.mmap(-1, 64 * 2**20)
    block.write(b"\x01" * len(block))
    now = current_rss_bytes()
    assert now - before > 32 * 2**20
    assert peak_rss_bytes() >= now
    block.close()


def test_memory_stats_load_cost_and_round_trip():
    m = MemoryStats(artifact_size_bytes=100, rss_before_load_bytes=1000, rss_after_load_bytes=1600,
                    peak_rss_bytes=2000)
    d = json.loads(json.dumps(m.to_dict()))
    assert d["load_cost_bytes"] == 600
    assert MemoryStats.from_dict(d) == m
