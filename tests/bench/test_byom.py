"""Bring your own model: users' ONNX files, torch modules, RWKV checkpoints and saved artifacts through the one
`edgesmith deploy`, with their own data and metric, and one clear error for each bad input."""
from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from edgesmith.common import EdgesmithError
from cli_helpers import assert_user_error, run_cli

FAST = ("--reps", "5", "--warmup", "1", "--quiet")


def _export(module, args, path, names, outs, dynamic=True, opset=17):
    dyn = {n: {0: "batch"} for n in (*names, *outs)} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), input_names=names, output_names=outs, dynamic_axes=dyn,
                          opset_version=opset, dynamo=False)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Small models made here, with data: an MLP (labels inside the .npz), a two-input int64/float model, a
    GRU cell whose state is an input and an output, a conv net, and a batch-1 export of the MLP."""
    d = tmp_path_factory.mktemp("byom")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
    _export(mlp, (torch.randn(2, 20),), d / "mlp.onnx", ["x"], ["y"])
    _export(mlp, (torch.randn(1, 20),), d / "mlp_b1.onnx", ["x"], ["y"], dynamic=False)
    x = rng.normal(size=(160, 20)).astype(np.float32)
    np.save(d / "calib.npy", x[:64])
    with torch.no_grad():
        labels = mlp(torch.from_numpy(x[64:])).argmax(1).numpy()
    np.savez(d / "eval.npz", x=x[64:], labels=labels)

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.fc = torch.nn.Embedding(50, 16), torch.nn.Linear(16, 3)

        def forward(self, ids, mask):
            return self.fc((self.emb(ids) * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1))

    _export(Two(), (torch.randint(0, 50, (2, 8)), torch.ones(2, 8)), d / "two.onnx", ["ids", "mask"], ["logits"])
    np.savez(d / "two_calib.npz", ids=rng.integers(0, 50, (32, 8)), mask=np.ones((32, 8), np.float32))
    np.savez(d / "two_eval.npz", ids=rng.integers(0, 50, (32, 8)), mask=np.ones((32, 8), np.float32))

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru, self.out = torch.nn.GRUCell(6, 12), torch.nn.Linear(12, 2)

        def forward(self, x, h):
            h2 = self.gru(x, h)
            return self.out(h2), h2

    _export(Cell(), (torch.randn(2, 6), torch.zeros(2, 12)), d / "gru.onnx", ["x", "h"], ["y", "h_out"])
    np.save(d / "seq_calib.npy", rng.normal(size=(16, 7, 6)).astype(np.float32))
    np.save(d / "seq_eval.npy", rng.normal(size=(8, 7, 6)).astype(np.float32))

    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 8 * 8, 3))
    _export(conv, (torch.randn(2, 3, 8, 8),), d / "conv.onnx", ["img"], ["y"])
    np.save(d / "img.npy", rng.normal(size=(16, 3, 8, 8)).astype(np.float32))
    return d


def _deploy(capsys, out, *argv) -> dict:
    code, _, err = run_cli(capsys, "deploy", *argv, "--out", out, *FAST)
    assert code == 0, err
    return json.loads((out / "report.json").read_text())


def test_onnx_file_with_labels_in_the_npz_scores_accuracy_on_every_target(capsys, files, tmp_path):
    for target in ("host-cpu", "jetson-orin-nano", "loihi2"):
        # TVM rows are left out: they are checked in tests/runtimes/test_tvm.py, and compiling them is most of the time
        r = _deploy(capsys, tmp_path / target, files / "mlp.onnx", "--target", target, "--no-tvm",
                    "--calibration-data", files / "calib.npy", "--eval-data", files / "eval.npz")
        assert r["reference"]["evaluation"]["metric"] == "accuracy" and r["reference"]["evaluation"]["value"] == 1.0
        assert r["reference"]["runtime"] == "onnxruntime" and r["reference"]["format"] == "onnx"
        rows = {x["variant"]: x for x in r["results"]}
        if target == "loihi2":  # a dense ReLU chain maps: Flatten? no, Gemm + Relu + Gemm
            assert rows["sigma-delta"]["bit_exact_reference"]["max_abs_diff"] == 0
            assert rows["sigma-delta"]["evaluation"]["value"] > 0.8
        else:
            assert rows["int8"]["evaluation"]["value"] > 0.9
        if target == "host-cpu":  # torch exported both Linear layers as Gemm: rewritten as MatMul, MatMulNBits takes them
            assert rows["int4"]["evaluation"]["value"] > 0.9 and rows["int4"]["size_bytes"] < rows["fp32"]["size_bytes"]


def test_int4_gemm_false_leaves_int4_out_of_a_model_whose_layers_are_all_gemm(capsys, files, tmp_path):
    r = _deploy(capsys, tmp_path / "r", files / "mlp.onnx", "--target", "host-cpu", "--no-tvm",
                "--calibration-data", files / "calib.npy", "--option", "int4_gemm=false")
    assert {x["variant"] for x in r["results"]} == {"fp32", "int8"}
    assert "variant int4 not built: its 2 weight layer(s) are Gemm, which int4_gemm=false keeps in fp32" \
        in r["plan"]["notes"]


def test_exclude_keeps_the_named_layers_of_an_onnx_file_fp32_in_int8_and_int4(capsys, files, tmp_path):
    first, second = [n.name for n in onnx.load(str(files / "mlp.onnx")).graph.node if n.op_type == "Gemm"]
    r = _deploy(capsys, tmp_path / "r", files / "mlp.onnx", "--target", "host-cpu", "--no-tvm",
                "--calibration-data", files / "calib.npy", "--option", f"exclude={json.dumps([first])}")
    for v in r["variants"][1:]:
        layers = {x["name"]: x for x in v["pass_reports"][-1]["layers"]}
        assert (layers[first]["action"], layers[first]["reason"]) == ("skipped", "excluded by the config: kept in fp32")
        assert layers[second]["action"] == "quantized", v["name"]
    assert f"kept in fp32 by exclude in the post-training variants: {first}" in r["plan"]["notes"]
    # every layer excluded: what was asked is built and says it quantized nothing, rather than failing the deploy
    r = _deploy(capsys, tmp_path / "all", files / "mlp.onnx", "--target", "host-cpu", "--no-tvm", "--variant", "int4",
                "--calibration-data", files / "calib.npy", "--option", f"exclude={json.dumps([first, second])}")
    assert [x["action"] for x in r["variants"][0]["pass_reports"][-1]["layers"]] == ["skipped", "skipped"]
    assert r["results"][0]["max_abs_diff"] < 1e-5  # fp32 throughout; the Gemms were rewritten as MatMul + Add


def test_a_weight_shared_by_two_layers_is_quantized_in_both(capsys, tmp_path):
    # torch's exporter gives the second use of a shared weight an Identity of the first (ALBERT's shared layers,
    # tied embeddings); read through it, int4 quantizes both MatMuls instead of keeping the weight fp32 beside a copy
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 64)

        def forward(self, x):
            return self.fc(torch.relu(self.fc(x)))

    torch.manual_seed(0)
    path = _export(Tied(), (torch.randn(2, 5, 64),), tmp_path / "tied.onnx", ["x"], ["y"])
    assert "Identity" in {n.op_type for n in onnx.load(str(path)).graph.node}
    r = _deploy(capsys, tmp_path / "r", path, "--target", "host-cpu", "--input-shape", "5,64", "--variant", "int4")
    layers = r["variants"][0]["pass_reports"][-1]["layers"]
    assert [x["action"] for x in layers] == ["quantized", "quantized"]
    assert any(n.startswith("1 Identity node(s) of a weight removed") for n in r["notes"])
    assert r["results"][0]["size_bytes"] < 0.4 * r["reference"]["size_bytes"]
    assert r["results"][0]["evaluation"]["value"] > 15


def test_without_labels_the_metric_is_fidelity_to_the_fp32_model(capsys, files, tmp_path):
    r = _deploy(capsys, tmp_path / "r", files / "two.onnx", "--target", "host-cpu",
                "--calibration-data", files / "two_calib.npz", "--eval-data", files / "two_eval.npz")
    ref = r["reference"]["evaluation"]
    assert ref["metric"] == "fidelity" and ref["extra"]["identical"] is True
    int8 = next(x for x in r["results"] if x["variant"] == "int8")
    assert 15 < int8["evaluation"]["value"] < 80 and int8["evaluation"]["extra"]["max_abs_error"] > 0
    # two inputs (int64 ids and a float mask): TVM, which feeds one tensor, is left out and says so
    assert {x["runtime"] for x in r["results"]} == {"onnxruntime"}
    assert any("tvm left out" in n and "2 inputs" in n for n in r["plan"]["notes"])


def test_recurrent_state_is_fed_back_and_int8_calibrates_on_the_states_it_reaches(capsys, files, tmp_path):
    r = _deploy(capsys, tmp_path / "r", files / "gru.onnx", "--target", "host-cpu",
                "--calibration-data", files / "seq_calib.npy", "--eval-data", files / "seq_eval.npy")
    assert any("h -> h_out fed back each step" in n for n in r["notes"])
    rows = {x["variant"]: x for x in r["results"]}
    assert rows["fp32"]["max_abs_diff"] == 0 and rows["int8"]["evaluation"]["value"] > 20


def test_a_batch_one_model_is_calibrated_evaluated_and_timed_one_sample_at_a_time(capsys, files, tmp_path):
    r = _deploy(capsys, tmp_path / "r", files / "mlp_b1.onnx", "--target", "host-cpu", "--no-tvm",
                "--calibration-data", files / "calib.npy", "--eval-data", files / "eval.npz")
    assert r["batch_sizes"] == [1]
    assert {x["variant"] for x in r["results"]} == {"fp32", "int8", "int4"}
    code, _, err = run_cli(capsys, "deploy", files / "mlp_b1.onnx", "--target", "host-cpu", "--batch", "64",
                           "--calibration-data", files / "calib.npy", "--out", tmp_path / "x")
    assert_user_error(code, err, "fixed batch of 1", "--batch 1")


@pytest.mark.lava
def test_loihi2_runs_a_conv_relu_model_with_the_convolution_lowered_to_sparse_synapses(capsys, files, tmp_path):
    out = tmp_path / "r"
    code, _, err = run_cli(capsys, "deploy", files / "conv.onnx", "--target", "loihi2", "--calibration-data",
                           files / "img.npy", "--eval-data", files / "img.npy", "--out", out, *FAST)
    assert code == 0, err
    r = json.loads((out / "report.json").read_text())
    (row,) = [x for x in r["results"] if x["runtime"] == "lava"]
    assert row["bit_exact_reference"]["max_abs_diff"] == 0
    assert row["evaluation"]["metric"] == "fidelity" and row["evaluation"]["value"] > 15  # output SQNR, dB
    first = row["energy"]["breakdown"]["placement"][0]
    # the 3x3 convolution's matrix has at most 27 taps per output of its 3*8*8 inputs: stored sparsely
    assert first["memory_bytes_per_core"] < 4 * 8 * 8 * 3 * 8 * 8


def test_loihi2_refuses_a_max_pooling_model_naming_the_operator_before_any_work(capsys, tmp_path):
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    _export(m, (torch.randn(2, 3, 8, 8),), tmp_path / "pool.onnx", ["img"], ["y"])
    np.save(tmp_path / "img.npy", np.random.default_rng(0).normal(size=(8, 3, 8, 8)).astype(np.float32))
    code, _, err = run_cli(capsys, "deploy", tmp_path / "pool.onnx", "--target", "loihi2",
                           "--calibration-data", tmp_path / "img.npy", "--out", tmp_path / "r")
    assert_user_error(code, err, "loihi2 cannot run pool.onnx", "operator MaxPool", "host-cpu")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("bad,needle", [
    ({"ids": np.zeros((4, 8), np.float32), "mask": np.ones((4, 8), np.float32)}, "input 'ids' is float32"),
    ({"ids": np.zeros((4, 9), np.int64), "mask": np.ones((4, 8), np.float32)}, "input 'ids' has shape (4, 9)"),
    ({"ids": np.zeros((4, 8), np.int64)}, "missing mask"),
    ({"ids": np.zeros((4, 8), np.int64), "mask": np.full((4, 8), np.nan, np.float32)}, "NaN"),
    ({"ids": np.zeros((4, 8), np.complex64), "mask": np.ones((4, 8), np.float32)}, "complex64"),
])
def test_user_data_is_checked_against_the_declared_inputs_naming_the_input(capsys, files, tmp_path, bad, needle):
    np.savez(tmp_path / "bad.npz", **bad)
    code, _, err = run_cli(capsys, "deploy", files / "two.onnx", "--target", "host-cpu",
                           "--calibration-data", tmp_path / "bad.npz", "--out", tmp_path / "r")
    assert_user_error(code, err, needle)
    assert not (tmp_path / "r").exists()


def test_old_opsets_are_upgraded_and_constant_weights_folded_so_int8_finds_the_layers(capsys, tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(10, 4)).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "wv")),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.save(model, str(tmp_path / "old.onnx"))
    np.save(tmp_path / "c.npy", rng.normal(size=(16, 10)).astype(np.float32))
    r = _deploy(capsys, tmp_path / "r", tmp_path / "old.onnx", "--target", "host-cpu", "--no-tvm",
                "--calibration-data", tmp_path / "c.npy")
    assert any("opset 11 upgraded to 13" in n for n in r["notes"]) and any("Constant" in n for n in r["notes"])
    int8 = next(v for v in r["variants"] if v["name"] == "int8")
    assert [layer["action"] for layer in int8["pass_reports"][-1]["layers"]] == ["quantized"]


def test_external_data_beside_the_model_is_read_and_a_missing_file_is_named(capsys, tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(64, 32)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 32])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.weights",
                    size_threshold=0)
    np.save(tmp_path / "c.npy", rng.normal(size=(8, 64)).astype(np.float32))
    r = _deploy(capsys, tmp_path / "r", tmp_path / "ext.onnx", "--target", "jetson-orin-nano",
                "--calibration-data", tmp_path / "c.npy")
    assert {x["variant"] for x in r["results"]} == {"fp32", "fp16", "int8"}
    (tmp_path / "ext.weights").unlink()
    code, _, err = run_cli(capsys, "deploy", tmp_path / "ext.onnx", "--target", "host-cpu", "--out", tmp_path / "x")
    assert_user_error(code, err, "external data file 'ext.weights'")


def test_torch_factory_torchscript_and_torch_export_files_deploy_like_onnx(capsys, files, tmp_path):
    (tmp_path / "net.py").write_text("import torch\n\ndef make():\n    torch.manual_seed(0)\n"
                                     "    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), "
                                     "torch.nn.Linear(16, 4))\n")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    torch.jit.save(torch.jit.script(net), str(tmp_path / "net.pt"))
    torch.export.save(torch.export.export(net, (torch.randn(1, 20),)), str(tmp_path / "net.pt2"))
    for spec in (f"{tmp_path / 'net.py'}:make", tmp_path / "net.pt", tmp_path / "net.pt2"):
        r = _deploy(capsys, tmp_path / f"r-{str(spec)[-3:]}", spec, "--target", "host-cpu", "--no-tvm",
                    "--calibration-data", files / "calib.npy", "--eval-data", files / "calib.npy")
        assert any("exported from torch to ONNX here" in n for n in r["notes"])
        assert next(x for x in r["results"] if x["variant"] == "fp32")["max_abs_diff"] < 1e-5
    # torch.export kept the batch of 1 it was exported with
    assert r["batch_sizes"] == [1]


def test_a_factory_that_initialises_at_random_gives_the_same_file_every_run_and_its_seed_changes_it(
        capsys, files, tmp_path):
    # the factory seeds nothing itself: edgesmith seeds torch around it, so the same inputs give the same artifact
    (tmp_path / "net.py").write_text("import torch\n\ndef make():\n    return torch.nn.Linear(20, 4)\n")
    spec = f"{tmp_path / 'net.py'}:make"
    written = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        code, out, err = run_cli(capsys, "quantize", spec, "--pass", "int8-qdq", "--calibration-data",
                                 files / "calib.npy", "--seed", seed, "--out", tmp_path / f"{name}.onnx", "--quiet")
        assert code == 0, err
        assert "fidelity of the written file (64 samples of user calibration data" in out
        written.append((tmp_path / f"{name}.onnx").read_bytes())
    assert written[0] == written[1] and written[0] != written[2]
    from edgesmith.bench.sources.torch_factory import load_factory

    torch.manual_seed(123)
    before = torch.get_rng_state()
    load_factory(spec, seed=0)
    assert torch.equal(before, torch.get_rng_state())  # the caller's generator is left as it was


def test_quantize_takes_an_rwkv_checkpoint_with_its_text_and_writes_an_unscored_file_without_evaluation_text(
        capsys, tmp_path):
    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model, official_state_dict

    torch.manual_seed(0)
    torch.save(official_state_dict(build_model(RWKVConfig(version=7, n_layer=1, n_embd=64, head_size=32))),
               tmp_path / "m.pth")
    text = "The quick brown fox jumps over the lazy dog. " * 40
    (tmp_path / "cal.txt").write_text(text)
    (tmp_path / "ev.txt").write_text(text[::-1])
    code, out, err = run_cli(capsys, "quantize", tmp_path / "m.pth", "--pass", "rwkv-rtn", "--option", "bits=4",
                             "--calibration-data", tmp_path / "cal.txt", "--eval-data", tmp_path / "ev.txt",
                             "--model-option", "eval_len=64", "--out", tmp_path / "q.onnx", "--quiet")
    assert code == 0, err
    assert "perplexity of the written file" in out and (tmp_path / "q.onnx.report.json").exists()
    # no evaluation text: the file is still written, and the output says why it is not scored
    code, out, err = run_cli(capsys, "quantize", tmp_path / "m.pth", "--pass", "rwkv-rtn", "--calibration-data",
                             tmp_path / "cal.txt", "--out", tmp_path / "q2.onnx", "--quiet")
    assert code == 0 and (tmp_path / "q2.onnx").exists(), err
    assert "not scored: " in out and "needs evaluation text" in out
    # a producer is scored on its own held-out data: the user's is for deploy
    code, _, err = run_cli(capsys, "quantize", "digits-mlp", "--eval-data", tmp_path / "ev.txt",
                           "--out", tmp_path / "d.onnx")
    assert_user_error(code, err, "digits-mlp is a producer", "edgesmith deploy digits-mlp --eval-data")
    assert not (tmp_path / "d.onnx").exists()


def test_a_factorys_npz_inputs_are_passed_in_forward_order_and_extra_arrays_are_refused(capsys, tmp_path):
    (tmp_path / "two.py").write_text(
        "import torch\n\nclass T(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.l = torch.nn.Linear(8, 3)\n    def forward(self, x, mask):\n        return self.l(x) * mask\n\n"
        "def make():\n    return T()\n")
    rng = np.random.default_rng(0)
    x, mask = rng.normal(size=(16, 8)).astype(np.float32), (rng.random((16, 3)) > 0.5).astype(np.float32)
    np.savez(tmp_path / "saved_backwards.npz", mask=mask, x=x)  # an .npz keeps this order, not forward's
    np.savez(tmp_path / "extra.npz", x=x, mask=mask, weights=np.ones(16, np.float32))
    spec = f"{tmp_path / 'two.py'}:make"
    r = _deploy(capsys, tmp_path / "r", spec, "--target", "host-cpu", "--eval-data", tmp_path / "saved_backwards.npz",
                "--variant", "fp32", "--no-tvm")
    assert r["results"][0]["evaluation"]["n_samples"] == 16
    code, _, err = run_cli(capsys, "deploy", spec, "--target", "host-cpu", "--eval-data", tmp_path / "extra.npz",
                           "--out", tmp_path / "r2")
    assert_user_error(code, err, "holds 3 input arrays (x, mask, weights)", "takes 2 (x, mask)")


def test_quantize_reports_a_scoring_failure_of_the_written_file_as_an_error_not_as_unscored(
        capsys, files, tmp_path, monkeypatch):
    from edgesmith.models.user import UserModel

    def broken(self, predict):  # as a quantized model whose outputs the metric refuses would fail
        raise EdgesmithError("the metric refused the outputs.", "check the model.")

    monkeypatch.setattr(UserModel, "evaluate", broken)
    (tmp_path / "net.py").write_text("import torch\n\ndef make():\n    return torch.nn.Linear(20, 4)\n")
    code, out, err = run_cli(capsys, "quantize", f"{tmp_path / 'net.py'}:make", "--pass", "int8-qdq",
                             "--calibration-data", files / "calib.npy", "--out", tmp_path / "q.onnx", "--quiet")
    assert_user_error(code, err, f"{tmp_path / 'q.onnx'} was written, but scoring it failed: the metric refused")
    assert "not scored" not in out


def test_a_torch_model_the_exporter_cannot_handle_is_refused_naming_the_operator(capsys, files, tmp_path):
    (tmp_path / "bad.py").write_text("import torch\n\nclass Eig(torch.nn.Module):\n"
                                     "    def forward(self, x):\n        return torch.linalg.eigh(x @ x.transpose(1, 2))[0]\n\n"
                                     "def make():\n    return Eig()\n")
    code, _, err = run_cli(capsys, "deploy", f"{tmp_path / 'bad.py'}:make", "--target", "host-cpu",
                           "--input-shape", "4,4", "--out", tmp_path / "r")
    assert_user_error(code, err, "exporting", "failed at operator", "eigh")


def test_official_rwkv_checkpoint_with_time_state_starts_from_it_in_torch_and_in_the_step_graph(capsys, tmp_path):
    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model, load_rwkv, official_state_dict

    torch.manual_seed(0)
    m = build_model(RWKVConfig(version=6, n_layer=1, n_embd=64, head_size=32))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    sd = official_state_dict(m)
    sd["blocks.0.att.time_state"] = torch.randn(2, 32, 32)
    torch.save({k: v.half() for k, v in sd.items()}, tmp_path / "state.pth")
    loaded = load_rwkv(tmp_path / "state.pth")
    # RWKV-6 starts from the transposed time_state, as the official package's loader does
    assert torch.equal(loaded.init_wkv[0], sd["blocks.0.att.time_state"].half().float().transpose(1, 2))
    text = "The quick brown fox jumps over the lazy dog. " * 120
    (tmp_path / "cal.txt").write_text(text)
    (tmp_path / "ev.txt").write_text(text[::-1])
    r = _deploy(capsys, tmp_path / "r", tmp_path / "state.pth", "--target", "host-cpu",
                "--calibration-data", tmp_path / "cal.txt", "--eval-data", tmp_path / "ev.txt",
                "--option", 'methods=["rwkv-rtn"]', "--option", "bits=[4]", "--model-option", "eval_len=64")
    assert r["kind"]["name"] == "token-lm" and any("time_state" in n for n in r["notes"])
    fp32 = next(x for x in r["results"] if x["variant"] == "fp32")
    assert fp32["evaluation"]["value"] == pytest.approx(r["reference"]["evaluation"]["value"], rel=1e-5)
    folder = tmp_path / "r" / "artifacts" / "rtn-4bit"
    assert (folder / "model.step.onnx.init.npz").exists() and (folder / "model.quantized.pth").exists()
    # a deploy can be rerun from the quantized checkpoint it wrote: deployed as it is, not quantized again
    r2 = _deploy(capsys, tmp_path / "r2", folder / "model.quantized.pth", "--target", "host-cpu",
                 "--calibration-data", tmp_path / "cal.txt", "--eval-data", tmp_path / "ev.txt",
                 "--model-option", "eval_len=64")
    (again,) = r2["results"]
    rtn = next(x for x in r["results"] if x["variant"] == "rtn-4bit")
    assert again["variant"] == "as-given"
    assert again["evaluation"]["value"] == pytest.approx(rtn["evaluation"]["value"], rel=1e-5)


def test_world_vocabulary_checkpoints_get_the_world_tokenizer():
    from edgesmith.models.rwkv.tokenizer import tokenizer_for

    tok = tokenizer_for(65536)
    ids = tok.encode("Hello, edgesmith!")
    assert tok.name == "world" and ids.max() < 65536 and tok.decode(ids) == "Hello, edgesmith!"
    assert tokenizer_for(256).name == "bytes"
    from edgesmith.common import EdgesmithError

    with pytest.raises(EdgesmithError, match="no tokenizer"):
        tokenizer_for(300)


def test_a_saved_tree_ensemble_and_a_producer_with_user_data_deploy(capsys, tmp_path):
    from edgesmith.models.gbrl.ensemble import GBTEnsemble

    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 4)).astype(np.float32)
    ens = GBTEnsemble(4, 2, lr=[0.1, 0.1], bias=[0.0, 0.0], max_depth=3)
    for _ in range(8):
        ens.fit_step(x, rng.normal(size=(128, 2)).astype(np.float32))
    ens.save(tmp_path / "policy.npz")
    np.save(tmp_path / "obs.npy", x)
    r = _deploy(capsys, tmp_path / "t", tmp_path / "policy.npz", "--target", "host-cpu", "--batch", "1",
                "--eval-data", tmp_path / "obs.npy")
    assert r["kind"]["name"] == "tree-policy" and {x["variant"] for x in r["results"]} == {"trees", "onnx", "c"}
    assert all(row["evaluation"]["value"] > 100 for row in r["results"])  # fidelity in dB: near-identical
    # a registered producer with the user's own evaluation data and metric
    from edgesmith.models import get_producer

    d = get_producer("digits-mlp").build()
    xs = d.calibration_data(64)
    with torch.no_grad():
        np.savez(tmp_path / "mine.npz", input=xs, labels=d.module(torch.from_numpy(xs)).argmax(1).numpy())
    r = _deploy(capsys, tmp_path / "p", "digits-mlp", "--target", "jetson-orin-nano", "--no-tvm", "--eval-data",
                tmp_path / "mine.npz")
    assert r["reference"]["evaluation"]["value"] == 1.0 and r["reference"]["evaluation"]["n_samples"] == 64


def test_metric_and_label_mistakes_are_user_errors(capsys, files, tmp_path):
    code, _, err = run_cli(capsys, "deploy", files / "mlp.onnx", "--target", "host-cpu", "--metric", "accuracy",
                           "--eval-data", files / "calib.npy", "--out", tmp_path / "r")
    assert_user_error(code, err, "needs labels")
    code, _, err = run_cli(capsys, "deploy", files / "mlp.onnx", "--target", "host-cpu", "--metric", "bleu",
                           "--eval-data", files / "eval.npz", "--out", tmp_path / "r")
    assert_user_error(code, err, "unknown metric 'bleu'", "top5")
    code, _, err = run_cli(capsys, "deploy", tmp_path / "nothing.onnx", "--target", "host-cpu", "--out", tmp_path / "r")
    assert_user_error(code, err, "does not exist")
    code, _, err = run_cli(capsys, "deploy", files / "mlp.onnx", "--target", "host-cpu", "--model-option", "colour=1",
                           "--out", tmp_path / "r")
    assert_user_error(code, err, "no option(s) colour")
    # class ids the model's 5 outputs cannot be: the argmax never matches them, so accuracy would be silently low
    np.save(tmp_path / "x.npy", np.load(files / "calib.npy"))
    for bad in (np.full(64, -1), np.full(64, 5)):
        np.save(tmp_path / "y.npy", bad.astype(np.int64))
        code, _, err = run_cli(capsys, "deploy", files / "mlp.onnx", "--target", "host-cpu", "--eval-data",
                               tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--out", tmp_path / "r")
        assert_user_error(code, err, "a class id must be 0 to 4")
        assert not (tmp_path / "r").exists()


def test_a_variant_that_its_runtime_cannot_run_is_a_failed_row_and_the_others_are_kept(capsys, files, tmp_path,
                                                                                       monkeypatch):
    # onnxruntime's own error on a file edgesmith built (once T5's int8 bucket Gather) must not end in a traceback,
    # nor cost the figures of the variants that did run
    from edgesmith.bench.pipeline import deploy as deploy_module

    real = deploy_module._VariantRun.row

    def row(self, art, variant, *a, **kw):
        if variant == "int4":
            raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Gather indices out of bounds")
        return real(self, art, variant, *a, **kw)

    monkeypatch.setattr(deploy_module._VariantRun, "row", row)
    code, out, err = run_cli(capsys, "deploy", files / "mlp.onnx", "--target", "host-cpu", "--no-tvm", "--input-shape",
                             "20", "--out", tmp_path / "r", *FAST)
    assert code == 0 and "Traceback" not in err
    assert "failed: int4 (onnxruntime): RuntimeError: [ONNXRuntimeError]" in out and "--option 'exclude=" in out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert {r["variant"] for r in report["results"]} == {"fp32"}  # int8 needs calibration data, not given here
    assert [f["variant"] for f in report["failed_runs"]] == ["int4"]
    assert any(w.startswith("variant int4 failed (onnxruntime)") for w in report["warnings"])

    def every_row_fails(self, art, variant, *a, **kw):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : no kernel")

    monkeypatch.setattr(deploy_module._VariantRun, "row", every_row_fails)
    code, _, err = run_cli(capsys, "deploy", files / "mlp.onnx", "--target", "host-cpu", "--no-tvm", "--input-shape",
                           "20", "--out", tmp_path / "none", *FAST)
    assert_user_error(code, err, "no variant of", "fp32 (onnxruntime) failed: RuntimeError")
    assert not (tmp_path / "none").exists()


def _vi(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


@pytest.mark.parametrize("state_in, state_out", [("state", "stateN"), ("h", "hn"), ("c", "cn"), ("h_in", "h_out"),
                                                 ("past_key_values.0.key", "present.0.key")])
def test_common_state_names_pair_even_when_the_output_shape_is_unknown(state_in, state_out):
    from edgesmith.bench.sources.onnx_file import find_state

    # Silero VAD declares its state (2, batch, 128) and its next state with no sizes at all: still a pair
    inputs = [_vi("x", ["b", 4]), _vi(state_in, [2, "b", 8])]
    assert find_state(inputs, [_vi("y", ["b", 1]), _vi(state_out, [None, None, None])], None) == \
        [(state_in, state_out, None)]
    assert find_state(inputs, [_vi("y", ["b", 1]), _vi(state_out, [3, None, None])], None) == []  # sizes disagree


def test_a_state_batch_axis_can_be_named_and_is_checked():
    from edgesmith.bench.sources.onnx_file import _recurrent_spec, find_state

    inputs, outputs = [_vi("x", ["b", 4]), _vi("s", [1, 5, 8])], [_vi("y", ["b", 1]), _vi("sn", [1, 5, 8])]
    pairs = find_state(inputs, outputs, "s:sn@1")
    assert pairs == [("s", "sn", 1)] and _recurrent_spec(inputs, outputs, pairs, "m.onnx")["state_batch_axes"] == {"s": 1}
    with pytest.raises(EdgesmithError, match="no batch axis 3"):
        _recurrent_spec(inputs, outputs, find_state(inputs, outputs, "s:sn@3"), "m.onnx")
    with pytest.raises(EdgesmithError, match="not a number"):
        find_state(inputs, outputs, "s:sn@x")


@pytest.mark.parametrize("const, needle", [("rate:16000", "names no input"), ("sr:fast", "not NAME:NUMBER"),
                                           ("sr:1.5", "not a int64 value")])
def test_a_bad_constant_is_one_error_naming_it(tmp_path, capsys, const, needle):
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT), helper.make_node("Mul", ["x", "srf"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_vi("x", ["b", 3]), helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [_vi("y", ["b", 3])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.save(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    code, _, err = run_cli(capsys, "deploy", path, "--target", "host-cpu", "--out", tmp_path / "o", "--eval-data",
                           tmp_path / "x.npy", "--model-option", f"const={const}", *FAST, "--no-tvm")
    assert_user_error(code, err, needle)


@pytest.mark.parametrize("form", ["dynamic", "qdq", "matmulnbits"])
def test_a_model_that_arrives_quantized_is_measured_as_it_is(files, tmp_path, capsys, form):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    model = tmp_path / f"{form}.onnx"
    if form == "dynamic":  # MatMulInteger + DynamicQuantizeLinear, as OCR models ship
        quantize_dynamic(str(files / "mlp.onnx"), str(model), weight_type=QuantType.QInt8)
    elif form == "matmulnbits":  # 4-bit weights, as LLM exports ship (written here by edgesmith's own int4 pass)
        code, _, err = run_cli(capsys, "quantize", files / "mlp.onnx", "--pass", "int4-weight-only", "--out", model,
                               "--quiet")
        assert code == 0, err
    else:
        x = np.load(files / "calib.npy")
        reader = type("R", (), {"it": iter([{"x": x[i:i + 16]} for i in range(0, 64, 16)]),
                                "get_next": lambda self: next(self.it, None)})()
        quantize_static(str(files / "mlp.onnx"), str(model), reader, quant_format=QuantFormat.QDQ)
    code, out, err = run_cli(capsys, "deploy", model, "--target", "host-cpu", "--out", tmp_path / "r",
                             "--calibration-data", files / "calib.npy", "--eval-data", files / "eval.npz", *FAST)
    assert code == 0, err
    assert "not built: int8: it is already quantized" in out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [(r["variant"], r["runtime"]) for r in report["results"]] == [("given", "onnxruntime")]
    assert any(f"arrives quantized ({'int4' if form == 'matmulnbits' else 'int8'}" in n for n in report["notes"])
    assert report["results"][0]["evaluation"]["value"] > 0.5  # it runs, and it is the labelled MLP
    code, _, err = run_cli(capsys, "deploy", model, "--target", "host-cpu", "--out", tmp_path / "r2", "--variant",
                           "int8", "--calibration-data", files / "calib.npy", *FAST)
    assert_user_error(code, err, "already quantized")
