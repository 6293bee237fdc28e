"""The EF-Landing claim script end to end at --quick settings (2 torchrun workers, 60 iterations)."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies.eflanding_claim import main
from edgesmith.common import EdgesmithError


def test_quick_claim_writes_table_and_plot_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "claim"
    assert main(["--out", str(out), "--quick"]) == 0
    assert {"table.json", "table.md", "claim.png"} <= {p.name for p in out.iterdir()}
    table = json.loads((out / "table.json").read_text())
    rows = {r["method"]: r for r in table["rows"]}
    # top-k 10% sends values + indices of 10% of the entries: 20% of the uncompressed floats
    assert rows["top-k 10% + EF21"]["floats_sent_per_worker"] == pytest.approx(
        0.2 * rows["uncompressed"]["floats_sent_per_worker"])
    assert table["settings"]["workers"] == 2 and table["launch"]["processes"] == 2
    assert "| uncompressed |" in capsys.readouterr().out
    with pytest.raises(EdgesmithError, match="--force"):
        main(["--out", str(out), "--quick"])
