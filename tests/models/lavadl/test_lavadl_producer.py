"""lavadl-digits: a Sigma-Delta network trained by lava-dl's SLAYER in .venv-lava and exported by lava-dl.

These tests start the Lava env's Python (training a tiny network takes a few seconds there); they fail,
not skip, when the env is missing, as the Lava runtime's tests do.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from edgesmith.common import EdgesmithError
from edgesmith.compress import netx_format
from edgesmith.models import get_producer

pytestmark = pytest.mark.lava

TINY = {"hidden": (16,), "epochs": 2}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import os

    os.environ["EDGESMITH_CACHE"] = str(tmp_path_factory.mktemp("cache"))  # train here, not from a stale cache
    try:
        return get_producer("lavadl-digits", seed=0, **TINY).build()
    finally:
        os.environ.pop("EDGESMITH_CACHE")


def test_the_file_is_lava_dls_own_export_in_its_units(tiny):
    net = netx_format.NetxNet.load(tiny.path)
    assert net.units == "lava-dl"  # no edgesmith group: the file is exactly what lava-dl wrote
    assert [lyr.n_out for lyr in net.layers] == [16, 10]
    assert net.layers[-1].sigma_output and not net.layers[0].sigma_output
    assert tiny.training_["lava_dl"].startswith("0.6")


def test_the_bit_exact_reference_agrees_with_slayers_own_float_outputs(tiny):
    x_te, y_te = tiny.test_data()
    net = netx_format.NetxNet.load(tiny.path)
    fixed, _ = netx_format.run_float(net, x_te)
    agree = np.mean(fixed.argmax(1) == tiny.slayer_test_logits_.argmax(1))
    assert agree > 0.95, agree  # SLAYER trains with the quantization netx applies; only rounding differs
    assert np.mean(fixed.argmax(1) == y_te) > 0.5  # two epochs of a 16-unit network already learn the digits


def test_the_same_settings_reuse_the_trained_file(tiny, monkeypatch):
    import os

    from edgesmith.models.lavadl import producer as mod

    monkeypatch.setattr(mod, "run_in_lava_env", lambda *a, **k: pytest.fail("retrained a cached network"))
    monkeypatch.setenv("EDGESMITH_CACHE", str(tiny.path.parents[2]))
    again = get_producer("lavadl-digits", seed=0, **TINY).build()
    assert again.path == tiny.path and os.path.getsize(again.path) > 0


def test_deploy_to_loihi2_runs_lava_dls_file_bit_exact(capsys, tiny, tmp_path, monkeypatch):
    from edgesmith.bench.cli import main

    monkeypatch.setenv("EDGESMITH_CACHE", str(tiny.path.parents[2]))
    x, y = tiny.test_data()
    np.save(tmp_path / "x.npy", x[:32]), np.save(tmp_path / "y.npy", y[:32])
    code = main(["deploy", "lavadl-digits", "--target", "loihi2", "--model-option", "hidden=16", "--model-option",
                 "epochs=2", "--eval-data", str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy"),
                 "--out", str(tmp_path / "r"), "--reps", "5", "--warmup", "1", "--quiet"])
    assert code == 0, capsys.readouterr().err
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    (row,) = [x for x in r["results"] if x["runtime"] == "lava"]
    assert row["bit_exact_reference"]["max_abs_diff"] == 0
    assert any("SLAYER" in n for n in r["notes"] + r["plan"]["notes"])


def test_bad_options_are_user_errors_before_any_training():
    with pytest.raises(EdgesmithError, match="hidden"):
        get_producer("lavadl-digits", hidden=(0,)).build()
    with pytest.raises(EdgesmithError, match="threshold"):
        get_producer("lavadl-digits", threshold=-1.0).build()
