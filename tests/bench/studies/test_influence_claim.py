"""The paper-3 claim script runs end to end at tiny size and never overwrites without --force."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import influence_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_and_plot_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "claim"
    assert influence_claim.main(["--out", str(out), "--quick", "--seeds", "0", "--q", "2"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "claim.png"}
    data = json.loads((out / "table.json").read_text())
    rows = {r["rho"]: r for r in data["summary"]}
    assert set(rows) == {0.0, 0.5, 1.0}
    assert rows[0.0]["influence_atypical_mean"] == pytest.approx(0.0, abs=1e-9)
    assert rows[1.0]["influence_atypical_mean"] == pytest.approx(1.0)
    assert "| q |" in capsys.readouterr().out
    with pytest.raises(EdgesmithError, match="--force"):
        influence_claim.main(["--out", str(out), "--quick", "--seeds", "0"])
