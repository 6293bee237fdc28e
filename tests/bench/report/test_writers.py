"""The deploy page: what a reader must not miss in the results table."""
from __future__ import annotations

from edgesmith.bench.report.writers import render_markdown


def _report(int8_p50: float, provenance: str = "measured") -> dict:
    ev = {"metric": "accuracy", "value": 0.9, "n_samples": 4}
    row = lambda v, p50, prov: {"variant": v, "runtime": "onnxruntime", "runtime_label": "onnxruntime", "evaluation": ev,
                                "latency": {"1": {"provenance": prov, "p50": p50}}}
    return {"model": "m", "target": {"name": "host-cpu"}, "batch_sizes": [1],
            "plan": {"latency_provenance": provenance}, "variants": [{"name": "fp32"}, {"name": "int8"}],
            "reference": {"runtime": "onnxruntime", "format": "onnx", "evaluation": ev},
            "results": [row("fp32", 1e-3, provenance), row("int8", int8_p50, provenance)]}


def _row(md: str, variant: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(f"| {variant} | onnxruntime | 0.9000"))


def test_a_compressed_variant_slower_than_the_uncompressed_one_is_marked_in_the_results_table():
    assert "**1.50x fp32**" in _row(render_markdown(_report(1.5e-3)), "int8")
    # within the margin, faster, or only estimated: no mark
    assert "**" not in _row(render_markdown(_report(1.05e-3)), "int8")
    assert "**" not in _row(render_markdown(_report(0.5e-3)), "int8")
    assert "**" not in _row(render_markdown(_report(1.5e-3, "estimated")), "int8")
