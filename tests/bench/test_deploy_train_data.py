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
