"""The skew-spectrum claim script at --quick settings: outputs, figures and the refusal to overwrite."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import skew_claim
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_and_plot_with_invariant_spectra(tmp_path, capsys):
    out = tmp_path / "claim"
    assert skew_claim.main(["--out", str(out), "--quick", "--perms", "2"]) == 0
    assert {"table.json", "table.md", "distinct_vs_k.png"} <= {p.name for p in out.iterdir()}
    res = json.loads((out / "table.json").read_text())
    rows = {(r["k"], r["orbit_function"]): r for r in res["rows"]}
    assert rows[(3, "none")]["distinct_spectra"] >= rows[(2, "none")]["distinct_spectra"]
    assert all(r["max_abs_change_under_relabelling"] == 0.0 for r in res["rows"])
    assert "| 3 | none |" in capsys.readouterr().out
    with pytest.raises(EdgesmithError, match="already exists"):
        skew_claim.main(["--out", str(out), "--quick"])
