"""The DP-FL claim script end to end at --quick settings (8 clients, 2 torchrun processes, one seed)."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies.dpfl_claim import main


def test_quick_claim_writes_table_and_plot_with_equal_privacy(tmp_path):
    out = tmp_path / "claim"
    assert main(["--out", str(out), "--quick"]) == 0
    assert {"table.json", "table.md", "claim.png"} <= {p.name for p in out.iterdir()}
    table = json.loads((out / "table.json").read_text())
    private = [r for r in table["rows"] if r["method"] != "non-private"]
    assert len(private) == 3
    for r in private:  # every private method is compared at the same spent epsilon
        assert r["epsilon_spent"] == pytest.approx(table["settings"]["epsilon"])
    assert "verdict" in table
