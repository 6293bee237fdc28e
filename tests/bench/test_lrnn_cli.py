"""`edgesmith deploy lrnn`: the CLI runs the denoiser's plan and refuses targets it does not serve."""
from __future__ import annotations

import json

import pytest

from edgesmith.bench.cli import main


def test_deploy_lrnn_on_another_target_is_a_user_error(tmp_path, capsys):
    assert main(["deploy", "lrnn", "--target", "host-cpu", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "loihi2" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.lava
@pytest.mark.slow
def test_quick_deploy_lrnn_writes_a_report_with_lava_matching_the_reference(tmp_path, capsys):
    out = tmp_path / "lrnn"
    assert main(["deploy", "lrnn", "--target", "loihi2", "--quick", "--no-sweep", "--lava-clips", "1",
                 "--quiet", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").is_file()
    assert report["bit_exact"]["max_abs_difference"] == 0 and report["bit_exact"]["clips"] == 1
    assert "estimated" in json.dumps(report["hardware"])
    assert main(["deploy", "lrnn", "--target", "loihi2", "--quick", "--out", str(out)]) == 2  # no overwrite
