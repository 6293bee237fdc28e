"""The gnn-iia claim script at --quick settings: writes its table and plot, refuses to overwrite."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import gnn_iia_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_json_md_and_png_and_refuses_overwrite(tmp_path):
    out = tmp_path / "claim"
    assert gnn_iia_claim.main(["--out", str(out), "--quick"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "claim.png"}
    result = json.loads((out / "table.json").read_text())
    assert [e["variant"] for e in result["summary"]] == list(gnn_iia_claim.VARIANTS)
    assert all(len(r["iia"]) == 9 for r in result["runs"])
    with pytest.raises(EdgesmithError, match="--force"):
        gnn_iia_claim.main(["--out", str(out), "--quick"])
