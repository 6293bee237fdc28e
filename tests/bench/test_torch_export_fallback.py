"""A torch module's ONNX export is kept only if onnxruntime runs it and it computes what torch computes; a legacy
export that fails that check gives way to the dynamo exporter (HF Mamba's legacy file has a Tile onnxruntime refuses),
and when neither exporter's file passes, one error names both."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.bench.sources import torch_factory as tf
from edgesmith.bench.sources.base import UserRequest
from edgesmith.common import EdgesmithError


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 3.0


class Wrong(torch.nn.Module):  # what a faulty exporter would write for Scale
    def forward(self, x):
        return x * 2.0


def _exporter(legacy_writes, monkeypatch):
    """The real exporters, except that the legacy one writes ``legacy_writes`` (a module), or raises when it is an
    exception."""
    real = tf._export
    calls = []

    def export(model, args, path, names, out_names, dynamo):
        calls.append("dynamo" if dynamo else "legacy")
        if not dynamo and isinstance(legacy_writes, Exception):
            raise legacy_writes
        real(tf._Outputs.wrap(legacy_writes) if not dynamo else model, args, path, names, out_names, dynamo)

    monkeypatch.setattr(tf, "_export", export)
    return calls


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))


def _request():
    return UserRequest(input_shapes={"": (4,)})


def test_a_legacy_file_that_computes_something_else_gives_way_to_dynamo_and_the_note_says_why(monkeypatch):
    calls = _exporter(Wrong(), monkeypatch)
    path, notes = tf.export_to_onnx(Scale(), "scale.py:make", b"k1", _request())
    assert calls == ["legacy", "dynamo"]
    import onnxruntime as ort

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(ort.InferenceSession(str(path)).run(None, {"input": x})[0], 3 * x)
    assert "by the dynamo exporter (the legacy exporter's file: the ONNX export of scale.py:make does not compute" \
           in notes[0]
    # the cached file keeps its note: the same inputs give the same report
    calls.clear()
    assert tf.export_to_onnx(Scale(), "scale.py:make", b"k1", _request())[1] == notes and calls == []


def test_when_no_exporter_writes_a_faithful_file_one_error_names_both(monkeypatch):
    _exporter(Wrong(), monkeypatch)
    monkeypatch.setattr(tf, "EXPORT_TOLERANCE", -1.0)  # dynamo's file is refused too
    with pytest.raises(EdgesmithError) as e:
        tf.export_to_onnx(Scale(), "scale.py:make", b"k2", _request())
    assert "does not compute what the torch module computes" in e.value.problem
    assert "(the legacy exporter's file); the dynamo exporter's file does not compute" in e.value.problem
    assert "export the model to ONNX yourself" in e.value.fix
    assert not list((tf.work_path(b"x", ".onnx").parent).glob("*.onnx"))  # nothing cached


def test_a_legacy_exporter_exception_then_a_faithful_dynamo_file_needs_no_note(monkeypatch):
    calls = _exporter(RuntimeError("Unsupported: ONNX export of operator aten::diff"), monkeypatch)
    _, notes = tf.export_to_onnx(Scale(), "scale.py:make", b"k3", _request())
    assert calls == ["legacy", "dynamo"] and "by the dynamo exporter" not in notes[0]
    assert notes[0].startswith("exported from torch to ONNX here; largest output difference")


def test_a_cached_file_that_fails_its_check_is_exported_again(monkeypatch):
    calls = _exporter(Scale(), monkeypatch)
    path, _ = tf.export_to_onnx(Scale(), "scale.py:make", b"k4", _request())
    path.write_bytes(b"not onnx")  # e.g. left by a version that cached files it could not run
    calls.clear()
    path2, notes = tf.export_to_onnx(Scale(), "scale.py:make", b"k4", _request())
    assert path2 == path and calls == ["legacy"] and "largest output difference" in notes[0]
