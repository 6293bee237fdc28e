"""Reference-model training presets: the large size's settings, where each size's weights live, and the clear
error when the (unshipped) large weights are missing."""
from __future__ import annotations

import json

import pytest

from edgesmith.common import EdgesmithError


def test_large_preset_trains_with_its_settings_and_command_line_overrides(tmp_path):
    from edgesmith.models.rwkv.checkpoint import load_rwkv
    from edgesmith.models.rwkv.train import SIZES, main

    # shrunk by flags so it runs in seconds; what it keeps of the preset is what a GPU run would use
    assert main(["--version", "7", "--size", "large", "--steps", "2", "--batch", "2", "--n-layer", "1",
                 "--n-embd", "64", "--head-size", "16", "--out-dir", str(tmp_path)]) == 0
    facts = json.loads((tmp_path / "rwkv7-ref-large.json").read_text())
    s = facts["settings"]
    assert (s["n_layer"], s["n_embd"], s["steps"], s["batch"]) == (1, 64, 2, 2)
    for k in ("seq_len", "lr", "weight_decay"):
        assert s[k] == SIZES["large"][k]
    assert facts["device"] == "cpu" and facts["data_fingerprint"]
    assert load_rwkv(tmp_path / "rwkv7-ref-large.pth").cfg.n_layer == 1
    with pytest.raises(SystemExit, match="--force"):  # never overwrites without asking
        main(["--version", "7", "--size", "large", "--steps", "1", "--out-dir", str(tmp_path)])


def test_small_weights_are_shipped_and_large_ones_live_in_the_cache(tmp_path, monkeypatch):
    from edgesmith.models.rwkv.train import WEIGHTS_DIR, reference_paths

    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    assert reference_paths(6)[0] == WEIGHTS_DIR / "rwkv6-ref.pth"
    assert reference_paths(7, size="large") == (tmp_path / "rwkv" / "rwkv7-ref-large.pth",
                                                tmp_path / "rwkv" / "rwkv7-ref-large.json")
    with pytest.raises(EdgesmithError, match="unknown reference size 'huge'"):
        reference_paths(7, size="huge")


def test_missing_large_weights_name_the_training_command_instead_of_training_for_hours(tmp_path, monkeypatch):
    from edgesmith.models import get_producer

    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    with pytest.raises(EdgesmithError, match="--size large --device cuda"):
        get_producer("rwkv6-ref", size="large").build()
    with pytest.raises(EdgesmithError, match="size is 'xl'"):
        get_producer("rwkv7-ref", size="xl").build()


def test_a_time_budget_becomes_a_step_count_that_the_facts_record(tmp_path):
    from edgesmith.models.rwkv.train import main

    tiny = ["--version", "6", "--batch", "2", "--n-layer", "1", "--n-embd", "32", "--head-size", "16"]
    assert main([*tiny, "--minutes", "0.02", "--out-dir", str(tmp_path)]) == 0
    facts = json.loads((tmp_path / "rwkv6-ref.json").read_text())
    per_step = facts["budget"]["probe_seconds_per_step"]
    # the step count is the budget over the probed step time, and it is what was trained (--steps reproduces it)
    assert facts["settings"]["steps"] == int(0.02 * 60 / per_step) >= 1
    with pytest.raises(SystemExit, match="cannot be combined"):
        main([*tiny, "--minutes", "1", "--steps", "5", "--out-dir", str(tmp_path / "b")])


def test_a_budget_too_small_for_one_step_is_refused_readably(tmp_path):
    from edgesmith.models.rwkv.train import main

    with pytest.raises(SystemExit, match="fits no training step"):
        main(["--version", "7", "--batch", "2", "--n-layer", "1", "--n-embd", "32", "--head-size", "16",
              "--minutes", "0.000001", "--out-dir", str(tmp_path)])
