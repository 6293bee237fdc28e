"""The WaveGC claim script at --quick settings: writes its table and plot, refuses to overwrite."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import wavegc_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_json_md_and_png_and_refuses_overwrite(tmp_path):
    out = tmp_path / "claim"
    assert wavegc_claim.main(["--out", str(out), "--quick"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "claim.png"}
    result = json.loads((out / "table.json").read_text())
    assert [e["model"] for e in result["summary"]] == list(wavegc_claim.MODELS)
    assert all(r["mae"] > 0 for r in result["runs"]) and result["settings"]["seeds"] == [0]
    with pytest.raises(EdgesmithError, match="--force"):
        wavegc_claim.main(["--out", str(out), "--quick"])
