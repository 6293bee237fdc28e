"""The main job end to end (quick mode): every target gets a report and the summary links them."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.cli import main


@pytest.mark.lava
@pytest.mark.slow
def test_quick_demo_writes_a_report_per_target_and_a_summary(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {s["target"] for s in summary} == {"host-cpu", "jetson-orin-nano", "loihi2"}
    for s in summary:
        folder = out / f"{s['model']}-{s['target']}"
        assert (folder / "report.md").is_file() and (folder / "report.json").is_file()
        assert s["rows"], s["target"]
    host = next(s for s in summary if s["target"] == "host-cpu")
    runtimes = {r["runtime"] for r in host["rows"]}
    assert {"onnxruntime", "tvm (untuned)"} <= runtimes
    md = (out / "summary.md").read_text()
    assert "int8 / fp32 p50 latency ratio" in md
    # a second run must not silently replace the first
    assert main(["demo", "--quick", "--quiet", "--out", str(out)]) == 2
