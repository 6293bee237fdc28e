"""The lava-dl vs conversion comparison script end to end at --quick settings (needs .venv-lava)."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies.lavadl_vs_conversion import main


@pytest.mark.lava
def test_quick_comparison_writes_table_and_plot_with_bit_exact_lava_rows(tmp_path):
    out = tmp_path / "cmp"
    assert main(["--out", str(out), "--quick"]) == 0
    assert {"table.json", "table.md", "comparison.png"} <= {p.name for p in out.iterdir()}
    rows = json.loads((out / "table.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["lavadl-digits", "digits-mlp"]
    for r in rows:
        assert r["lava_vs_reference_max_abs_diff"] == 0
        assert r["n_samples"] == 48 and r["energy_provenance"].startswith("estimated")
        assert r["synops_per_sample"] > 0 and r["cores"] >= 2
    assert main(["--out", str(out), "--quick"]) == 2  # an existing folder is not replaced without --force
