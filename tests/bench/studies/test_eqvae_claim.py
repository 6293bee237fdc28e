"""The EQ-VAE claim script at --quick size: every output file, the three models, no silent overwrite."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies.eqvae_claim import main
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "claim"
    main(["--out", str(out), "--quick", "--seeds", "0"])
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "claim.png"}
    data = json.loads((out / "table.json").read_text())
    assert set(data["summary"]) == {"none", "plain", "eq"}
    run = data["runs"][0]["modes"]["eq"]
    assert set(run["equivariance_mse"]) == {"rotation", "scale", "scale+rotation"}
    assert data["notes"] and "EQ-VAE fine-tune" in capsys.readouterr().out
    with pytest.raises(EdgesmithError, match="--force"):
        main(["--out", str(out), "--quick", "--seeds", "0"])
