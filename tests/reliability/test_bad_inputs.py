"""The bad-input corpus: every case a user met (or may meet) that once gave a traceback, lost data or was
silently accepted. Each case is a command, the exit code and message it must give, and what must be on
disk afterwards (nothing written, the user's files untouched)."""
from __future__ import annotations

import errno
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from edgesmith.bench.cli import main


@dataclass
class Case:
    """``setup(tmp) -> argv``; after running it, ``exit`` and ``needle`` must match and ``check(tmp)`` hold."""

    name: str
    setup: Callable[[Path], list]
    needle: str
    exit: int = 2
    check: Callable[[Path], None] = field(default=lambda tmp: None)
    env: dict = field(default_factory=dict)


def _mlp_onnx(tmp: Path, name="m.onnx") -> Path:
    w = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
                          [numpy_helper.from_array(w, "w")])
    path = tmp / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _user_folder(tmp: Path) -> Path:
    d = tmp / "adir"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "keep.txt").write_text("mine")
    return d


def _kept(tmp: Path) -> None:
    assert (tmp / "adir" / "sub" / "keep.txt").read_text() == "mine"


def _nothing(*names):
    def check(tmp: Path) -> None:
        for n in names:
            assert not (tmp / n).exists(), n
        assert not list(tmp.glob(".*.tmp")), list(tmp.glob(".*.tmp"))
    return check


def _hdf5_without_layers(path):
    import h5py

    with h5py.File(path, "w") as f:  # e.g. a Keras weights file
        f.create_dataset("model_weights", data=np.zeros(3))


def _quantize(tmp, data, name="c.npy"):
    m = _mlp_onnx(tmp)
    if isinstance(data, dict):
        np.savez(tmp / name, **data)
    else:
        np.save(tmp / name, data)
    return ["quantize", m, "--pass", "int8-qdq", "--calibration-data", tmp / name, "--out", tmp / "q.onnx"]


def _pth(tmp, obj, raw=False, name="bad.pth"):
    path = tmp / name
    if raw:
        path.write_bytes(obj)
    elif isinstance(obj, bytes):
        path.write_bytes(obj)
    else:
        torch.save(obj, path)
    return ["deploy", path, "--target", "host-cpu", "--out", tmp / "r"]


def _recipe(tmp, text):
    (tmp / "r.toml").write_text('model = "digits-mlp"\ntarget = "host-cpu"\n' + text)
    return ["deploy", "--recipe", tmp / "r.toml", "--out", tmp / "r"]


CASES = [
    # --- 1. --force never deletes what edgesmith did not write ----------------------------------------------
    Case("export --force over a user folder", lambda t: (_user_folder(t), ["export", "digits-mlp", "--out", t / "adir",
                                                                            "--force"])[1], "is a folder", check=_kept),
    Case("deploy --force into a user folder", lambda t: (_user_folder(t), ["deploy", "digits-mlp", "--target",
                                                                            "jetson-orin-nano", "--out", t / "adir",
                                                                            "--force"])[1],
         "edgesmith did not write", check=_kept),
    Case("file output over an existing file without --force",
         lambda t: ((t / "m.onnx").write_text("mine"), ["export", "digits-mlp", "--out", t / "m.onnx"])[1],
         "already exists", check=lambda t: (t / "m.onnx").read_text() == "mine" or pytest.fail("overwritten")),
    # --- 4. tracebacks that are user errors -----------------------------------------------------------------
    Case("RWKV loader on a non-checkpoint pickle", lambda t: _pth(t, [1, 2, 3]), "not a dict of named tensors",
         check=_nothing("r")),
    Case("RWKV loader on a raw pickle", lambda t: _pth(t, pickle.dumps({"emb.weight": np.zeros(3)}), raw=True),
         "cannot be read", check=_nothing("r")),
    Case("RWKV loader on a text file", lambda t: _pth(t, b"hello, this is text\n" * 20, raw=True), "cannot be read",
         check=_nothing("r")),
    Case("a data .npz given as the model", lambda t: (np.savez(t / "x.npz", x=np.zeros((4, 3))),
                                                       ["deploy", t / "x.npz", "--target", "host-cpu", "--out",
                                                        t / "r"])[1],
         "x.npz is not a saved tree ensemble: it holds x, not meta", check=_nothing("r")),
    Case("an .npy array named .npz given as the model",
         lambda t: ((t / "a.npz").write_bytes((np.save(t / "a.npy", np.zeros(3)), (t / "a.npy").read_bytes())[1]),
                    ["deploy", t / "a.npz", "--target", "host-cpu", "--out", t / "r"])[1],
         "it is one array, not an .npz archive", check=_nothing("r")),
    Case("a .net file that is not HDF5", lambda t: ((t / "n.net").write_bytes(b"\x00garbage" * 64),
                                                    ["deploy", t / "n.net", "--target", "loihi2", "--out", t / "r"])[1],
         "n.net: is not a readable HDF5 file", check=_nothing("r")),
    Case("an HDF5 file that is not a netx network", lambda t: (_hdf5_without_layers(t / "k.h5"),
                                                               ["deploy", t / "k.h5", "--target", "loihi2", "--out",
                                                                t / "r"])[1],
         "has no 'layer' group, so it is not a netx network", check=_nothing("r")),
    Case("RWKV loader on an ONNX file renamed .pth",
         lambda t: _pth(t, _mlp_onnx(t).read_bytes(), raw=True), "cannot be read", check=_nothing("r")),
    Case("RWKV loader on 0-d tensors", lambda t: _pth(t, {"emb.weight": torch.tensor(1.0),
                                                           "blocks.0.att.time_faaaa": torch.tensor(1.0),
                                                           "head.weight": torch.tensor(2.0)}),
         "is not an RWKV", check=_nothing("r")),
    Case("calibration .npz of strings", lambda t: _quantize(t, {"x": np.array(["a", "b"])}, "c.npz"),
         "inputs must be real numbers", check=_nothing("q.onnx", "q.onnx.report.json")),
    Case("calibration 0-d array", lambda t: _quantize(t, np.float32(3.0)), "no samples",
         check=_nothing("q.onnx")),
    Case("recipe reps of the wrong type", lambda t: _recipe(t, '[bench]\nreps = "many"\n'), "reps is 'many'",
         check=_nothing("r")),
    Case("recipe batch_sizes of strings", lambda t: _recipe(t, '[bench]\nbatch_sizes = ["a"]\n'), "batch_sizes",
         check=_nothing("r")),
    Case("recipe negative seed", lambda t: _recipe(t, "seed = -1\n"), "seed is -1", check=_nothing("r")),
    Case("recipe threads of the wrong type", lambda t: _recipe(t, 'threads = "x"\n'), "threads is 'x'",
         check=_nothing("r")),
    Case("recipe fractional tvm_tune_trials", lambda t: _recipe(t, "[plan]\ntvm_tune_trials = 1.5\n"),
         "tvm_tune_trials is 1.5", check=_nothing("r")),
    Case("recipe plan = 3", lambda t: _recipe(t, "plan = 3\n"), "plan is 3, not a table", check=_nothing("r")),
    Case("bench --batch -1", lambda t: ["bench", _mlp_onnx(t), "--batch", "-1"], "not a positive batch size"),
    Case("deploy --batch 10**9 fails before training", lambda t: ["deploy", "digits-wide", "--target", "host-cpu",
                                                                  "--batch", str(10**9), "--out", t / "r"],
         "GiB of inputs", check=_nothing("r")),
    Case("Lava interpreter path that is a folder", lambda t: ["deploy", "digits-mlp", "--target", "loihi2",
                                                              "--out", t / "r"],
         "not an executable Python", check=_nothing("r"), env={"EDGESMITH_LAVA_PYTHON": "/tmp"}),
    # --- 5. no silent acceptance ------------------------------------------------------------------------------
    Case("int64 calibration for a float input", lambda t: _quantize(t, np.zeros((4, 8), np.int64)),
         "is int64 but the model takes float32", check=_nothing("q.onnx")),
    Case("bool calibration", lambda t: _quantize(t, np.zeros((4, 8), bool)), "bool", check=_nothing("q.onnx")),
    Case("complex calibration", lambda t: _quantize(t, np.zeros((4, 8), np.complex64)), "complex64",
         check=_nothing("q.onnx")),
    Case("negative --n-calibration (quantize)", lambda t: _quantize(t, np.zeros((4, 8), np.float32))
         + ["--n-calibration", "-1"], "not a positive number", check=_nothing("q.onnx")),
    Case("negative --n-calibration (deploy)", lambda t: ["deploy", "digits-mlp", "--target", "host-cpu",
                                                         "--n-calibration", "-1", "--out", t / "r"],
         "n_calibration is -1", check=_nothing("r")),
    # --- 8. messages that name the real problem -------------------------------------------------------------
    Case("missing ONNX external data", lambda t: _external_without_data(t), "external data file 'w.bin'",
         check=_nothing("q.onnx")),
    Case("calibration of the wrong shape", lambda t: _quantize(t, np.zeros((4, 9), np.float32)),
         "input 'x' has shape (4, 9)", check=_nothing("q.onnx")),
    Case("an RWKV quantizer on an ONNX classifier", lambda t: [a if a != "int8-qdq" else "rwkv-gptq"
                                                               for a in _quantize(t, np.zeros((4, 8), np.float32))],
         "pass 'rwkv-gptq' takes a torch model", check=_nothing("q.onnx")),
    Case("unknown model option lists the valid ones", lambda t: ["deploy", "lrnn-denoiser", "--target", "host-cpu",
                                                                 "--model-option", "colour=1", "--out", t / "r"],
         "takes: tiny=False, width=None, epochs=None", check=_nothing("r")),
    Case("bench --out that exists is refused before measuring",
         lambda t: ((t / "o.json").write_text("{}"), ["bench", _mlp_onnx(t), "--out", t / "o.json"])[1],
         "already exists"),
    # the fix names the flag that sets the window: it is a model option, and eval_len for the evaluation text
    Case("RWKV evaluation text shorter than one window", lambda t: _rwkv_text(t, "a few words"),
         "--model-option eval_len=", check=_nothing("r")),
    Case("RWKV window length of zero", lambda t: _rwkv_text(t, "text " * 100, "--model-option", "seq_len=0"),
         "seq_len=0 is not a window length", check=_nothing("r")),
    Case("RWKV window length that is not a number", lambda t: _rwkv_text(t, "text " * 100, "--model-option",
                                                                         "eval_len=long"),
         "eval_len='long' is not a window length", check=_nothing("r")),
    Case("torch factory run on inputs of the wrong shape",
         lambda t: (_linear_factory(t), ["deploy", t / "f.py:make", "--target", "host-cpu", "--input-shape", "3",
                                         "--out", t / "r"])[1],
         "fails on example inputs (input (2, 3) float32): RuntimeError: mat1 and mat2", check=_nothing("r")),
    # an exported graph that does not compute what the torch module computes is refused, not deployed
    Case("torch factory whose forward draws noise in eval mode",
         lambda t: _factory_forward(t, "x @ self.w + torch.randn_like(x[:, :2])"),
         "does not compute what the torch module computes", check=_nothing("r")),
    Case("torch factory whose trace fixes the batch",
         lambda t: _factory_forward(t, "(x @ self.w).reshape(2, 2)"),
         "runs only at the batch it was traced with (2); at batch 1", check=_nothing("r")),
    # export's example data is checked like any data file before the model is traced on it
    Case("export example data with a NaN", lambda t: _export_examples(t, np.full((3, 4), np.nan, np.float32)),
         "example data for input 'input' contains 12 NaN or infinite values", check=_nothing("o.onnx")),
    Case("export example data with no samples", lambda t: _export_examples(t, np.zeros((0, 4), np.float32)),
         "has shape (0, 4): no samples", check=_nothing("o.onnx")),
    Case("export example data of the wrong width", lambda t: _export_examples(t, np.zeros((3, 5), np.float32)),
         "fails on example inputs (input (2, 5) float32)", check=_nothing("o.onnx")),
    # export settings the chosen output format would ignore, each refused before anything is written
    Case("export to .pth with a pass option", lambda t: _rwkv_export(t, "o.pth", "--option", "vq_form=int8"),
         "--option vq_form would be ignored", check=_nothing("o.pth")),
    Case("export to .onnx with --dtype", lambda t: _rwkv_export(t, "o.onnx", "--dtype", "bf16"),
         "--dtype bf16 would be ignored", check=_nothing("o.onnx")),
    Case("RWKV checkpoint without any text", lambda t: (_rwkv_text(t, ""), ["quantize", t / "m.pth", "--pass",
                                                                            "rwkv-rtn", "--out", t / "q.onnx"])[1],
         "--eval-data (UTF-8 text or a folder of .txt files)", check=_nothing("q.onnx")),
    Case("quantize output named for another format",
         lambda t: (_rwkv_text(t, ""), ["quantize", t / "m.pth", "--pass", "rwkv-rtn", "--calibration-data",
                                         t / "cal.txt", "--out", t / "q.pth"])[1],
         "writes a file of format 'onnx'", check=_nothing("q.pth", "q.pth.report.json")),
    Case("deploy excluding a node the ONNX file lacks", lambda t: _deploy_excluding(t, ["mm", "/fc/Gemm"]),
         "--option exclude names node(s) not in the model: /fc/Gemm", check=_nothing("r")),
    Case("deploy excluding on loihi2", lambda t: _deploy_excluding(t, ["mm"], "loihi2"),
         "loihi2 runs every layer in fixed point; it cannot keep mm in fp32", check=_nothing("r")),
]


def _deploy_excluding(tmp: Path, names: list, target: str = "host-cpu") -> list:
    np.save(tmp / "c.npy", np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32))
    return ["deploy", _mlp_onnx(tmp), "--target", target, "--calibration-data", tmp / "c.npy", "--no-tvm",
            "--option", f"exclude={json.dumps(names)}", "--out", tmp / "r"]


def _factory_forward(tmp: Path, body: str) -> list:
    (tmp / "f.py").write_text("import torch\n\n\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                              "        super().__init__()\n        self.w = torch.nn.Parameter(torch.ones(4, 2))\n\n"
                              f"    def forward(self, x):\n        return {body}\n\n\ndef make():\n    return M()\n")
    return ["deploy", tmp / "f.py:make", "--target", "host-cpu", "--input-shape", "4", "--out", tmp / "r"]


def _linear_factory(tmp: Path) -> None:
    (tmp / "f.py").write_text("import torch\n\ndef make():\n    return torch.nn.Linear(4, 2)\n")


def _export_examples(tmp: Path, data: np.ndarray) -> list:
    _linear_factory(tmp)
    np.save(tmp / "x.npy", data)
    return ["export", tmp / "f.py:make", "--example-data", tmp / "x.npy", "--out", tmp / "o.onnx"]


def _rwkv_export(tmp: Path, name: str, *extra) -> list:
    _rwkv_text(tmp, "")
    return ["export", tmp / "m.pth", "--out", tmp / name, *extra]


def _rwkv_text(tmp: Path, eval_text: str, *extra) -> list:
    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model, official_state_dict

    torch.manual_seed(0)
    torch.save(official_state_dict(build_model(RWKVConfig(version=7, n_layer=1, n_embd=64, head_size=32))),
               tmp / "m.pth")
    (tmp / "cal.txt").write_text("The quick brown fox jumps over the lazy dog. " * 20)
    (tmp / "ev.txt").write_text(eval_text)
    return ["deploy", tmp / "m.pth", "--target", "host-cpu", "--calibration-data", tmp / "cal.txt",
            "--eval-data", tmp / "ev.txt", *extra, "--out", tmp / "r"]


def _external_without_data(tmp: Path) -> list:
    w = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(m, str(tmp / "e.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp / "w.bin").unlink()
    np.save(tmp / "c.npy", np.zeros((4, 8), np.float32))
    return ["quantize", tmp / "e.onnx", "--calibration-data", tmp / "c.npy", "--out", tmp / "q.onnx"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gives_one_line_and_leaves_nothing_behind(case, tmp_path, capsys, monkeypatch):
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    argv = [str(a) for a in case.setup(tmp_path)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == case.exit, err
    assert "Traceback" not in err and err.startswith("edgesmith: error: ") and "fix:" in err
    assert case.needle in err, err
    case.check(tmp_path)


def test_a_full_disk_while_quantizing_leaves_neither_model_nor_report(tmp_path, capsys, monkeypatch):
    import shutil

    argv = [str(a) for a in _quantize(tmp_path, np.zeros((8, 8), np.float32))]
    real = shutil.copyfile

    def full(src, dst, *a, **k):
        if str(dst).startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(shutil, "copyfile", full)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the disk is full" in err and "Traceback" not in err
    assert not (tmp_path / "q.onnx").exists() and not (tmp_path / "q.onnx.report.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_folder_without_write_permission_is_a_user_error(tmp_path, capsys, monkeypatch):
    # tests run as root, where chmod does not stop writes: the kernel's answer is simulated instead
    import tempfile

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "ro"))

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    assert main(["export", "digits-mlp", "--out", str(tmp_path / "ro" / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert "permission was denied" in err and "choose a folder you can write to" in err


def test_force_replaces_a_folder_edgesmith_wrote(tmp_path, capsys):
    out = tmp_path / "r"
    args = ["deploy", "digits-mlp", "--target", "jetson-orin-nano", "--variant", "fp32", "--out", str(out), "--quiet"]
    assert main(args) == 0
    assert (out / ".edgesmith-output").exists()
    assert main(args) == 2  # not without --force
    assert main(args + ["--force"]) == 0 and (out / "report.json").exists()
