"""NIR graphs deployed with `edgesmith deploy graph.nir --target loihi2`: one exported by snnTorch from a
network trained here, one written with the nir package, and refusals before any work."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_helpers import assert_user_error, run_cli
from edgesmith.bench.studies.nir_roundtrip import train_snntorch_digits
from nir_graphs import chain_graph

FAST = ("--reps", "5", "--warmup", "1", "--quiet", "--batch", "1")


@pytest.fixture(scope="module")
def snn_files(digits, tmp_path_factory):
    import nir
    from edgesmith.models.digits import _load_digits_split

    d = tmp_path_factory.mktemp("nir_src")
    x_tr, x_te, y_tr, y_te = _load_digits_split(0)
    net, graph = train_snntorch_digits(x_tr, y_tr)
    nir.write(str(d / "snn.nir"), graph)
    with torch.no_grad():
        snn_acc = float(np.mean(net(torch.tensor(x_te[:48], dtype=torch.float32)).argmax(1).numpy() == y_te[:48]))
    np.save(d / "cal.npy", x_tr[:128].astype(np.float32))
    np.save(d / "x.npy", x_te[:48].astype(np.float32)), np.save(d / "y.npy", y_te[:48])
    return d, snn_acc


@pytest.mark.lava
def test_an_snntorch_export_deploys_to_loihi2_bit_exact_with_accuracy(capsys, snn_files, tmp_path):
    d, snn_acc = snn_files
    out = tmp_path / "r"
    code, _, err = run_cli(capsys, "deploy", d / "snn.nir", "--target", "loihi2", "--calibration-data", d / "cal.npy",
                           "--eval-data", d / "x.npy", "--labels", d / "y.npy", "--out", out, *FAST)
    assert code == 0, err
    r = json.loads((out / "report.json").read_text())
    assert r["reference"]["runtime"] == "nir-float" and r["reference"]["format"] == "nir"
    # the float NIR semantics score what snnTorch itself scores (snnTorch's reset-to-zero acts a step later)
    assert abs(r["reference"]["evaluation"]["value"] - snn_acc) <= 0.05
    (row,) = [x for x in r["results"] if x["runtime"] == "lava"]
    assert row["variant"] == "lif-fixed"
    assert row["bit_exact_reference"]["max_abs_diff"] == 0  # Lava == netx-ref, integer for integer
    assert row["evaluation"]["value"] >= r["reference"]["evaluation"]["value"] - 0.1
    assert row["energy"]["provenance"] == "estimated" and row["activity"]["synops"] > 0


@pytest.mark.lava
def test_a_graph_written_with_nir_is_scored_by_fidelity_without_labels(capsys, tmp_path):
    import nir

    nir.write(str(tmp_path / "g.nir"), chain_graph("LI", n_in=8))
    x = np.random.default_rng(0).uniform(0, 2, (32, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, _, err = run_cli(capsys, "deploy", tmp_path / "g.nir", "--target", "loihi2", "--calibration-data",
                           tmp_path / "x.npy", "--eval-data", tmp_path / "x.npy", "--model-option", "steps=8",
                           "--out", tmp_path / "r", *FAST)
    assert code == 0, err
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["reference"]["evaluation"]["metric"] == "fidelity"
    notes = " ".join(n for v in r["variants"] for p in v["pass_reports"] for n in p["notes"])
    assert "8 steps per sample" in notes and "argmax agreement" in notes


def test_a_graph_with_an_unsupported_node_is_refused_by_name_before_any_work(capsys, tmp_path):
    import nir

    def delay(nodes, edges):
        nodes["delay1"] = nir.Delay(delay=np.ones(8))
        edges.remove(("input", "fc1"))
        edges += [("input", "delay1"), ("delay1", "fc1")]

    nir.write(str(tmp_path / "conv.nir"), chain_graph("LI", extra=delay, type_check=False))
    code, _, err = run_cli(capsys, "deploy", tmp_path / "conv.nir", "--target", "loihi2", "--out", tmp_path / "r")
    assert_user_error(code, err, "delay1", "Delay")
    assert not (tmp_path / "r").exists()


def test_host_cpu_refuses_a_nir_graph_and_names_loihi2(capsys, tmp_path):
    import nir

    nir.write(str(tmp_path / "g.nir"), chain_graph("LI"))
    code, _, err = run_cli(capsys, "deploy", tmp_path / "g.nir", "--target", "host-cpu", "--out", tmp_path / "r")
    assert_user_error(code, err, "nir", "loihi2")
