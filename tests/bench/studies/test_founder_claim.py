"""The FOUNDER claim script end to end at --quick settings."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import founder_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_and_plot_and_refuses_overwrite(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "claim"
    assert founder_claim.main(["--out", str(out), "--quick"]) == 0
    table = json.loads((out / "table.json").read_text())
    assert set(table["summary"]["success"]) == {"temporal", "cosine", "random"}
    assert all(-1 <= v["mean"] <= 1 for v in table["summary"]["spearman"].values())
    assert (out / "table.md").read_text().startswith("# FOUNDER") and (out / "founder_claim.png").stat().st_size > 0
    with pytest.raises(EdgesmithError):
        founder_claim.main(["--out", str(out), "--quick"])
