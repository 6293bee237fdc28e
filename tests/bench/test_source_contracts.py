"""Registry contract for model sources (``bench/sources``), as ``tests/test_contracts.py`` is for the other
registries: every registered source, handed a damaged file of its own kind (truncated, empty, or holding the
wrong content), is refused by ``deploy`` with one user error naming the file, with no traceback on stderr
(the libraries' loggers included) and no report folder written; the same for a path that does not exist.
A new source must add its case here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from edgesmith.bench.sources.base import find_source, source_names
from cli_helpers import assert_user_error, run_cli


class _Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def _truncated(path, keep: float = 0.5):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    return path


def _onnx(t):
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.ones(12, np.float32))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
    onnx.save(helper.make_model(graph), str(t / "m.onnx"))
    return _truncated(t / "m.onnx")


def _factory(t):  # a factory that returns something other than a module
    (t / "net.py").write_text("def make():\n    return 3\n")
    return f"{t / 'net.py'}:make"


def _torchscript(t):
    torch.jit.save(torch.jit.script(_Lin().eval()), str(t / "m.pt"))
    return _truncated(t / "m.pt")


def _torch_export(t):
    torch.export.save(torch.export.export(_Lin().eval(), (torch.zeros(1, 4),)), str(t / "m.pt2"))
    return _truncated(t / "m.pt2")


def _rwkv(t):
    torch.save({"emb.weight": torch.zeros(16, 8), "blocks.0.ln1.weight": torch.ones(8)}, str(t / "m.pth"))
    return _truncated(t / "m.pth")


def _rwkv_quantized(t):  # the format marker of a quantized file, none of its contents
    from edgesmith.compress.rwkvquant.qcheckpoint import FORMAT

    torch.save({"format": FORMAT}, str(t / "q.pth"))
    return t / "q.pth"


def _trees(t):
    (t / "e.npz").write_bytes(b"")
    return t / "e.npz"


def _netx(t):
    (t / "n.net").write_bytes(b"\x89HDF\r\n" + bytes(range(256)) * 4)
    return t / "n.net"


def _nir(t):
    (t / "g.nir").write_bytes(b"\x89HDF\r\n")
    return t / "g.nir"


def _file_name(spec: str) -> str:  # the file a spec names (file.py:factory names file.py)
    return Path(spec.split(":")[0]).name


DAMAGED = {"onnx": _onnx, "torch-factory": _factory, "torchscript": _torchscript, "torch-export": _torch_export,
           "rwkv-checkpoint": _rwkv, "edgesmith-rwkv-quantized": _rwkv_quantized, "tree-ensemble": _trees,
           "netx": _netx, "nir": _nir}


def test_every_registered_source_has_a_damaged_file_case():
    assert sorted(DAMAGED) == sorted(source_names())


@pytest.mark.parametrize("name", source_names())
def test_a_damaged_file_of_each_source_is_one_user_error_naming_it(name, capfd, caplog, tmp_path):
    spec = str(DAMAGED[name](tmp_path))
    assert find_source(spec).name == name  # the case reaches the source it is written for
    code, _, err = run_cli(capfd, "deploy", spec, "--target", "host-cpu", "--out", tmp_path / "r", "--quiet")
    assert_user_error(code, err, _file_name(spec))
    assert "Traceback" not in err and err.count("edgesmith: error:") == 1
    assert not (tmp_path / "r").exists()
    # a library that logs the failure with its traceback prints it on the user's terminal before the error
    assert not [r.name for r in caplog.records if r.exc_info and r.levelno >= 30]


@pytest.mark.parametrize("name", source_names())
def test_a_missing_file_of_each_source_is_one_user_error_naming_it(name, capsys, tmp_path):
    spec = str(DAMAGED[name](tmp_path))
    (tmp_path / _file_name(spec)).unlink()
    code, _, err = run_cli(capsys, "deploy", spec, "--target", "host-cpu", "--out", tmp_path / "r", "--quiet")
    assert_user_error(code, err, _file_name(spec))
    assert not (tmp_path / "r").exists()
