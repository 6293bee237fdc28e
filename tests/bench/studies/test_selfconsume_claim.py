"""The self-consuming claim script's quick run: outputs written, one curve per seed and round."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import selfconsume_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "claim"
    assert selfconsume_claim.main(["--out", str(out), "--quick", "--no-progress"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "selfconsume_claim.png"}
    res = json.loads((out / "table.json").read_text())
    assert [r["condition"] for r in res["runs"]] == ["benign", "flip-gap 20%"]
    for r in res["runs"]:
        assert len(r["expected_reward"]) == 1 and len(r["expected_reward"][0]) == res["settings"]["rounds"] + 1
    with pytest.raises(EdgesmithError):
        selfconsume_claim.main(["--out", str(out), "--quick", "--no-progress"])
