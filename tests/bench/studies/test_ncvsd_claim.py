"""The NCVSD claim script at --quick size: every output file, honest notes, no silent overwrite."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies.ncvsd_claim import main
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "claim"
    main(["--out", str(out), "--quick", "--seeds", "0"])
    assert {p.name for p in out.iterdir() if p.name != ".edgesmith-output"} == {"table.json", "table.md", "claim.png"}
    data = json.loads((out / "table.json").read_text())
    assert data["seeds"] == [0] and data["steps"] == [1, 2, 4]
    assert set(data["summary"]["ncvsd"]) == {"1", "2", "4"}
    assert data["summary"]["noise_floor"][0] < data["summary"]["untrained"]["1"][0]
    assert data["notes"] and "teacher Heun" in capsys.readouterr().out
    with pytest.raises(EdgesmithError, match="--force"):
        main(["--out", str(out), "--quick", "--seeds", "0"])
