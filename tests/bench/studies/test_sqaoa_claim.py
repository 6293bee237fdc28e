"""The SQAOA claim script's quick run: outputs written atomically, figures consistent, --out protected."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import sqaoa_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "claim"
    assert sqaoa_claim.main(["--out", str(out), "--quick", "--no-progress"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "sqaoa_claim.png"}
    res = json.loads((out / "table.json").read_text())
    for row in res["rows"]:
        ratios = row["depths"]["1"]["sqaoa_ratio"] + row["depths"]["1"]["onehot_ratio"]
        assert all(0 <= r <= 1 + 1e-9 for r in ratios)  # nothing beats the brute-force optimum
    assert "| n |" in capsys.readouterr().out
    with pytest.raises(EdgesmithError):
        sqaoa_claim.main(["--out", str(out), "--quick", "--no-progress"])
