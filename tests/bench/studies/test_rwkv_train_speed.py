"""The training-speed benchmark: both WKV forms train the same model to the same losses, and it reports them."""
from __future__ import annotations

import json

from edgesmith.bench.studies.rwkv_train_speed import main


def test_both_forms_step_the_same_model_to_the_same_losses_and_are_reported(tmp_path, capsys):
    assert main(["--versions", "6", "7", "--size", "small", "--batch", "2", "--steps", "2", "--warmup", "1",
                 "--threads", "1", "--out-dir", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "results_rwkv6_rwkv7.json").read_text())
    assert [r["version"] for r in payload["results"]] == [6, 7]
    for r in payload["results"]:
        # three optimizer steps on identical data: the chunked and token-by-token forms stay the same model
        assert len(r["forms"]["chunked"]["losses"]) == 3 and r["max_loss_gap"] < 1e-4
        assert all(len(f["step_seconds"]) == 2 and f["median_s"] > 0 for f in r["forms"].values())
    md = (tmp_path / "table_rwkv6_rwkv7.md").read_text()
    assert "| rwkv7 | token-by-token |" in md and "ESTIMATED" in md
    assert (tmp_path / "train_speed_rwkv6_rwkv7.png").stat().st_size > 0


def test_a_cuda_request_without_cuda_is_refused_readably(tmp_path, monkeypatch):
    import pytest
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device"):
        main(["--device", "cuda", "--out-dir", str(tmp_path)])
