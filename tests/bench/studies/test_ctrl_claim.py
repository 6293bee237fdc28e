"""The CTRL claim script runs end to end with the tiny config and never overwrites without --force."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import ctrl_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_curves_for_every_critic(tmp_path):
    out = tmp_path / "claim"
    assert ctrl_claim.main(["--out", str(out), "--quick", "--seeds", "0", "--rounds", "2"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "ctrl_claim.png"}
    data = json.loads((out / "table.json").read_text())
    for method in ctrl_claim.METHODS:
        curve = data["summary"][method]["mean"]
        assert len(curve) == 3 and curve[0] == 0.0  # every test program starts buggy
        assert all(0.0 <= v <= 1.0 for v in curve)
    with pytest.raises(EdgesmithError, match="--force"):
        ctrl_claim.main(["--out", str(out), "--quick", "--seeds", "0"])
