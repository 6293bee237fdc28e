"""A netx HDF5 file (edgesmith's export-netx, or lava-dl's) deployed as it is: `edgesmith deploy net.net`."""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from cli_helpers import assert_user_error, run_cli

FAST = ("--reps", "5", "--warmup", "1", "--quiet")


@pytest.fixture(scope="module")
def netx_files(digits, tmp_path_factory):
    d = tmp_path_factory.mktemp("netx_src")
    from edgesmith.bench.cli import main

    assert main(["quantize", "digits-mlp", "--pass", "export-netx", "--out", str(d / "digits.net"), "--quiet"]) == 0
    x, y = digits.test_data()
    np.save(d / "x.npy", x[:48]), np.save(d / "y.npy", y[:48])
    return d


@pytest.mark.lava
def test_a_netx_file_deploys_to_loihi2_bit_exact_with_accuracy_and_per_layer_placement(capsys, netx_files, tmp_path):
    out = tmp_path / "r"
    code, _, err = run_cli(capsys, "deploy", netx_files / "digits.net", "--target", "loihi2", "--eval-data",
                           netx_files / "x.npy", "--labels", netx_files / "y.npy", "--out", out, *FAST)
    assert code == 0, err
    r = json.loads((out / "report.json").read_text())
    assert r["reference"]["runtime"] == "netx-ref" and r["reference"]["format"] == "netx"
    (row,) = [x for x in r["results"] if x["runtime"] == "lava"]
    assert row["variant"] == "netx"  # deployed as given: no pass rewrote the file
    assert row["bit_exact_reference"]["max_abs_diff"] == 0
    assert row["evaluation"]["value"] == r["reference"]["evaluation"]["value"] > 0.9
    energy = row["energy"]
    assert energy["provenance"].startswith("estimated")
    placement = energy["breakdown"]["placement"]
    # one Lava process per dense layer, named after the torch layers it came from (digits-mlp's Sequential)
    assert [p["layer"] for p in placement] == ["0", "2", "4"]
    assert all(p["cores"] >= 1 for p in placement)


def test_export_netx_writes_every_suffix_that_deploy_reads_as_netx(capsys, tmp_path):
    # quantize once kept its own copy of the suffixes without .hdf5, so `--out x.hdf5` was refused
    from edgesmith.compress.netx_format import NetxNet

    code, _, err = run_cli(capsys, "quantize", "digits-mlp", "--pass", "export-netx", "--out", tmp_path / "d.hdf5",
                           "--quiet")
    assert code == 0, err
    assert len(NetxNet.load(tmp_path / "d.hdf5").layers) == 3


def test_host_cpu_refuses_a_netx_file_and_names_the_target_that_runs_it(capsys, netx_files, tmp_path):
    code, _, err = run_cli(capsys, "deploy", netx_files / "digits.net", "--target", "host-cpu", "--out", tmp_path / "r")
    assert_user_error(code, err, "netx", "loihi2")
    assert not (tmp_path / "r").exists()


def test_an_hdf5_file_that_is_not_a_netx_network_is_not_taken_for_one(capsys, tmp_path):
    with h5py.File(tmp_path / "weights.h5", "w") as f:
        f.create_dataset("model_weights", data=np.zeros(3))
    code, _, err = run_cli(capsys, "deploy", tmp_path / "weights.h5", "--target", "loihi2", "--out", tmp_path / "r")
    assert_user_error(code, err, "weights.h5")
