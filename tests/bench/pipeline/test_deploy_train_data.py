"""--train-data: the user's own inputs and labels are what QAT variants fine-tune on."""
from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import assert_user_error, run_cli

from edgesmith.models import get_producer


@pytest.fixture(scope="module")
def digits_train(tmp_path_factory):
    x, y = get_producer("digits-mlp").build().training_data()
    d = tmp_path_factory.mktemp("train")
    np.savez(d / "train.npz", input=x[:300], labels=y[:300])
    np.save(d / "inputs.npy", x[:200])
    bad = x[:50].copy()
    bad[3, 5] = np.nan
    np.savez(d / "nan.npz", input=bad, labels=y[:50])
    return d


def _pass_notes(out) -> str:
    return json.dumps(json.loads((out / "report.json").read_text())["variants"])


def test_qat_fine_tunes_on_the_users_inputs_and_labels(capsys, tmp_path, digits_train):
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", "--variant", "qat-w8a8",
                           "--option", "qat_epochs=1", "--train-data", digits_train / "train.npz", "--no-tvm",
                           "--reps", "5", "--warmup", "1", "--quiet", "--out", tmp_path / "r")
    assert code == 0, err
    notes = _pass_notes(tmp_path / "r")
    assert "on 300 training data (cross-entropy on labels)" in notes  # the producer's own set has 1437


def test_inputs_without_labels_are_distilled_on(capsys, tmp_path, digits_train):
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", "--variant", "qat-w4a8",
                           "--option", "qat_epochs=1", "--train-data", digits_train / "inputs.npy", "--no-tvm",
                           "--reps", "5", "--warmup", "1", "--quiet", "--out", tmp_path / "r")
    assert code == 0, err
    assert "on 200 training inputs (MSE to the float model" in _pass_notes(tmp_path / "r")


def test_bad_training_data_is_a_readable_error_before_any_work(capsys, tmp_path, digits_train):
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", "--option", "qat_epochs=1",
                           "--train-data", digits_train / "nan.npz", "--quiet", "--out", tmp_path / "r")
    assert_user_error(code, err, "training data", "NaN")
    assert not (tmp_path / "r").exists()
    code, _, err = run_cli(capsys, "deploy", "lrnn-denoiser", "--target", "host-cpu", "--model-option", "tiny=true",
                           "--train-data", digits_train / "inputs.npy", "--quiet", "--out", tmp_path / "s")
    assert_user_error(code, err, "--train-data", "kind stream")


def test_a_python_train_fn_fine_tunes_the_quantized_model_in_place_of_the_built_in_loop(tmp_path, digits_train):
    import torch

    import edgesmith

    data = np.load(digits_train / "train.npz")
    x, y = torch.from_numpy(data["input"]), torch.from_numpy(data["labels"].astype(np.int64))
    seen = []

    def my_loop(model):  # the user's own training: one SGD epoch with their loss
        seen.append(sorted({type(m).__name__ for m in model.modules()} & {"QuantLinear", "QuantIdentity"}))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for i in range(0, len(x), 50):
            loss = torch.nn.functional.cross_entropy(model(x[i:i + 50]), y[i:i + 50])
            opt.zero_grad()
            loss.backward()
            opt.step()

    out = edgesmith.deploy("digits-mlp", "host-cpu", out=tmp_path / "r", variants=["qat-w8a8"], options={"qat_epochs": 1},
                           tvm=False, reps=5, warmup=1, train_fn=my_loop)
    assert seen and "QuantLinear" in seen[0]  # called once, on the brevitas model
    report = json.loads((out / "report.json").read_text())
    assert "the user's train_fn" in _pass_notes(out) and "my_loop" in report["options"]["train_fn"]
    assert report["results"][0]["evaluation"]["value"] > 0.9

    def broken(model):
        raise ValueError("shapes do not match")

    with pytest.raises(edgesmith.EdgesmithError, match="your train_fn raised ValueError: shapes do not match"):
        edgesmith.deploy("digits-mlp", "host-cpu", out=tmp_path / "s", variants=["qat-w8a8"],
                         options={"qat_epochs": 1}, tvm=False, reps=5, warmup=1, train_fn=broken)
    assert not (tmp_path / "s").exists()


FACTORY = '''
import torch
from torch import nn


def build():  # a user's own architecture, not a producer: a conv front end and a Linear head, trained here
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    net = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(),
                        nn.Linear(8 * 6 * 6, 10))
    d = load_digits()
    x, y = torch.tensor(d.data[:1000] / 16, dtype=torch.float32), torch.tensor(d.target[:1000])
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(80):
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval()
'''


def test_a_users_torch_factory_is_fine_tuned_by_qat_on_their_data(capsys, tmp_path, digits_train):
    (tmp_path / "net.py").write_text(FACTORY)
    data = np.load(digits_train / "train.npz")
    x, y = get_producer("digits-mlp").build().test_data()
    np.savez(tmp_path / "eval.npz", input=x, labels=y)
    code, _, err = run_cli(capsys, "deploy", f"{tmp_path / 'net.py'}:build", "--target", "host-cpu",
                           "--variant", "fp32", "--variant", "qat-w4a8", "--option", "qat_epochs=2",
                           "--train-data", digits_train / "train.npz", "--eval-data", tmp_path / "eval.npz",
                           "--no-tvm", "--reps", "5", "--warmup", "1", "--quiet", "--out", tmp_path / "r")
    assert code == 0, err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    qat = next(v for v in report["variants"] if v["name"] == "qat-w4a8")
    assert [p["config"]["kind"] for p in qat["pass_reports"]] == ["torch-source", "qat-w4a8"]
    assert "on 300 training data (cross-entropy on labels)" in json.dumps(qat["pass_reports"])
    acc = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert acc["fp32"] > 0.85 and acc["qat-w4a8"] > acc["fp32"] - 0.03  # 4-bit weights, accuracy kept


def test_an_onnx_file_has_no_torch_module_to_fine_tune(capsys, tmp_path, digits_train):
    import torch

    torch.onnx.export(torch.nn.Sequential(torch.nn.Linear(64, 10)), (torch.zeros(1, 64),), str(tmp_path / "m.onnx"),
                      input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "b"}}, dynamo=False)
    code, _, err = run_cli(capsys, "deploy", tmp_path / "m.onnx", "--target", "host-cpu", "--option", "qat_epochs=1",
                           "--train-data", digits_train / "train.npz", "--quiet", "--out", tmp_path / "r")
    assert_user_error(code, err, "--train-data", "no torch module behind it")
    assert not (tmp_path / "r").exists()
