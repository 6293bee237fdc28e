"""The paper-6 claim script runs end to end on tiny settings and writes its outputs atomically."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import ood_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_run_writes_table_and_plots_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "claim"
    assert ood_claim.main(["--out", str(out), "--quick", "--seeds", "0", "1"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "auroc.png", "histograms.png"}
    table = json.loads((out / "table.json").read_text())
    assert table["seeds"] == [0, 1] and len(table["runs"]) == 2
    far = table["summary"]["far-discriminative"]
    assert far["msp"]["mean"] <= 0.5  # the uncertainty pathology shows even at tiny scale
    assert "| far-discriminative |" in capsys.readouterr().out
    with pytest.raises(EdgesmithError):
        ood_claim.main(["--out", str(out), "--quick"])
