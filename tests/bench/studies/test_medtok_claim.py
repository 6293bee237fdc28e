"""The MedTok claim script at --quick settings: outputs, both tokenizers, refusal to overwrite."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import medtok_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_for_both_tokenizers(tmp_path):
    out = tmp_path / "claim"
    assert medtok_claim.main(["--out", str(out), "--quick", "--seeds", "0"]) == 0
    assert {"table.json", "table.md", "auprc_usage.png"} <= {p.name for p in out.iterdir()}
    res = json.loads((out / "table.json").read_text())
    assert set(res["summary"]) == {"medtok", "text-vq"}
    for r in res["runs"]:
        assert 0.0 < r["auprc"] <= 1.0 and 0.0 < r["usage"]["all_paths"]["fraction_used"] <= 1.0
    with pytest.raises(EdgesmithError, match="already exists"):
        medtok_claim.main(["--out", str(out), "--quick"])
