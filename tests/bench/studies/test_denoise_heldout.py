"""The held-out denoiser benchmark (tiny model): every (variant, runtime) row, per-noise scores, goals, files."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.studies import denoise_heldout as H


@pytest.fixture(scope="module")
def report():
    return H.run(quick=True, pairs=[p for p in H.PAIRS if p[1] != "lava"], log=lambda *_: None)


def test_every_row_scores_every_clip_per_noise_type_with_a_measured_real_time_factor(report):
    assert [(r["variant"], r["runtime"]) for r in report["rows"]] == [p for p in H.PAIRS if p[1] != "lava"]
    for row in report["rows"]:
        assert row["clips"] == report["clips"] == sum(v["clips"] for v in row["per_noise"].values())
        assert row["rtf_model"] > 0 and "stoi_gain" in row


def test_the_streaming_step_scores_what_the_whole_clip_model_scores(report):
    rows = {(r["variant"], r["runtime"]): r for r in report["rows"]}
    for variant in ("dense", "sparse"):
        assert rows[(variant, "onnxruntime")]["si_snri_db"] == pytest.approx(rows[(variant, "torch")]["si_snri_db"],
                                                                             abs=1e-3)


def test_goals_are_judged_from_the_rows_not_assumed(report):
    fixed = next(r for r in report["rows"] if r["runtime"] == "lrnn-ref")
    assert report["goals_met"]["fixed_si_snri_db"] == (fixed["si_snri_db"] >= 6.0)
    worst = min(v["si_snri_db"] for v in fixed["per_noise"].values())
    assert report["goals_met"]["fixed_min_noise_type_si_snri_db"] == (worst >= 1.0)


def test_report_folder_has_json_markdown_and_plot(report, tmp_path):
    out = H.write(tmp_path / "r", report)
    assert json.loads((out / "report.json").read_text())["clips"] == report["clips"]
    assert "| fixed | lrnn-ref |" in (out / "report.md").read_text()
    assert (out / "per_noise.png").read_bytes()[:4] == b"\x89PNG"
