"""The paper-18 claim script runs end to end on tiny settings (one seed, 4-bit) and writes its outputs."""
from __future__ import annotations

import json

import numpy as np
import pytest

from edgesmith.bench.studies import tsv_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_run_writes_every_method_and_the_quantized_shift(tmp_path, capsys):
    out = tmp_path / "claim"
    assert tsv_claim.main(["--out", str(out), "--quick", "--seeds", "0", "--bits", "4"]) == 0
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "auroc.png", "scores.png"}
    table = json.loads((out / "table.json").read_text())
    row = table["runs"][0]["row"]
    assert set(row["auroc"]) == {"probe", "exemplars only", "TSV"}
    assert all(0.0 <= v <= 1.0 for v in row["auroc"].values())
    shift = table["summary"]["compressed"]["rwkvquant-4bit"]["TSV shift"]["mean"]
    assert np.isclose(shift, row["compressed"]["rwkvquant-4bit"]["TSV"] - row["auroc"]["TSV"])
    assert 3.5 < table["quantization"]["rwkvquant-4bit"]["bits_per_weight"] < 5
    assert "| TSV |" in capsys.readouterr().out
    with pytest.raises(EdgesmithError):
        tsv_claim.main(["--out", str(out), "--quick"])
