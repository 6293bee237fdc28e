"""``export-step-onnx``: the one-step graph of a recurrent model, state batch first as inputs and outputs.

onnxruntime decodes the same tokens as torch (fp32 and RWKVQuant-quantized), and a batch of whole
sequences fed step by step (``runtimes.stateful``) gives the torch model's parallel-forward logits."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, apply_pass
from edgesmith.compress.export_step import ExportStepOnnxConfig, export_step_onnx, step_greedy_ort, torch_greedy
from edgesmith.compress.rwkvquant import make_config, quantize_rwkv
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model
from edgesmith.runtimes import get_runtime
from edgesmith.runtimes.stateful import run_sequence

CALIB = np.random.default_rng(0).integers(0, 256, size=(4, 32))


def tiny(version: int):
    torch.manual_seed(version)
    m = build_model(RWKVConfig(version=version, n_layer=2, n_embd=64, head_size=16)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


@pytest.mark.parametrize("version", [6, 7])
def test_fp32_step_graph_decodes_torch_tokens_and_batched_sequences_match_the_parallel_forward(tmp_path, version):
    m = tiny(version)
    res = apply_pass(Artifact("torch", module=m), ExportStepOnnxConfig(accuracy_level=0),
                     PassContext(workdir=tmp_path))
    art = res.artifact
    spec = art.meta["recurrent"]
    # one graph tensor per state field and layer (RWKV's state_layer_dim), batch first in each
    assert spec["input"] == "token" and [s for s, _ in spec["state"]] == [
        "att_x.0", "att_x.1", "ffn_x.0", "ffn_x.1", "wkv.0", "wkv.1"]
    assert spec["state_shapes"]["att_x.0"] == [64] and spec["state_shapes"]["wkv.1"] == [4, 16, 16]
    # each layer's new state is written by its own last op, not stacked or transposed into a whole-model state
    nodes = onnx.load(art.path).graph.node
    producer = {o: n.op_type for n in nodes for o in n.output}
    assert {producer[o] for _, o in spec["state"]} <= {"Add", "Gather"}
    assert step_greedy_ort(art.path, [1, 2, 3], 12) == torch_greedy(m, [1, 2, 3], 12)
    tokens = np.random.default_rng(1).integers(0, 256, size=(3, 10))
    rt = get_runtime("onnxruntime", threads=1).load(art)
    logits, stats = run_sequence(rt, spec, tokens)
    with torch.no_grad():
        ref = m(torch.as_tensor(tokens))[0].numpy()
    assert logits.shape == ref.shape and np.allclose(logits, ref, atol=1e-4) and stats["steps"] == 10


@pytest.mark.parametrize("scale_block", [0, 16])
def test_quantized_step_graph_uses_matmulnbits_and_vq_gather_and_matches_torch(tmp_path, scale_block):
    m = tiny(7)
    q, rep = quantize_rwkv(m, CALIB, make_config("rwkvquant", bits=4, group_size=32, sq_percentile=60.0,
                                                 kmeans_iters=3, n_calibration=4, vq_scale_block=scale_block))
    counts = export_step_onnx(q, tmp_path / "q.onnx", accuracy_level=0)
    assert counts["matmulnbits"] == rep.extra["n_sq"] and counts["vq_gather"] == rep.extra["n_vq"] > 0
    ops = {n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node}
    assert {"MatMulNBits", "Gather"} <= ops
    assert step_greedy_ort(tmp_path / "q.onnx", [4, 5], 12) == torch_greedy(q, [4, 5], 12)


@pytest.mark.parametrize("bits", [3, 4])
def test_symmetric_sq_layers_are_written_without_zero_points_and_give_the_same_logits(tmp_path, bits):
    m = tiny(6)
    tokens = np.random.default_rng(2).integers(0, 256, size=(2, 6))
    for sym in (False, True):
        q, _ = quantize_rwkv(m, CALIB, make_config("rtn", bits=bits, group_size=32, symmetric=sym))
        out = export_step_onnx(q, tmp_path / f"q{sym}.onnx", accuracy_level=0)
        nbits = [n for n in onnx.load(tmp_path / f"q{sym}.onnx").graph.node if n.op_type == "MatMulNBits"]
        # MatMulNBits' default zero point (8) stands for the symmetric grid's, re-centred for 3-bit codes
        assert nbits and {len(n.input) for n in nbits} == ({3} if sym else {4})
        rt = get_runtime("onnxruntime", threads=1).load(Artifact("onnx", path=tmp_path / f"q{sym}.onnx"))
        logits, _ = run_sequence(rt, out["recurrent"], tokens)
        with torch.no_grad():
            ref = q(torch.as_tensor(tokens))[0].numpy()
        assert np.allclose(logits, ref, atol=1e-3)


def test_a_module_without_a_step_is_refused_with_a_clear_error(tmp_path):
    with pytest.raises(EdgesmithError, match="step"):
        apply_pass(Artifact("torch", module=torch.nn.Linear(3, 2)), ExportStepOnnxConfig(), PassContext(workdir=tmp_path))


class _TupleState(torch.nn.Module):
    def zero_state(self, batch):
        return (torch.zeros(batch, 3),)

    def step(self, token, state):
        return torch.zeros(token.shape[0], 4), state


def test_a_state_that_is_not_a_named_tuple_or_misdeclares_its_layers_is_refused(tmp_path):
    with pytest.raises(EdgesmithError, match="not a NamedTuple"):
        export_step_onnx(_TupleState(), tmp_path / "a.onnx")
    m = tiny(7)
    m.state_batch_dim = 0  # a per-layer split needs (layers, batch, ...) tensors
    with pytest.raises(EdgesmithError, match="per-layer state"):
        export_step_onnx(m, tmp_path / "b.onnx")
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_decode_graph_has_static_shapes_fewer_nodes_and_the_same_outputs(tmp_path):
    # batch=1 fixes every shape so onnxruntime can fold the shape arithmetic the dynamic graph keeps
    m = tiny(7)
    dyn = export_step_onnx(m, tmp_path / "dyn.onnx")
    dec = export_step_onnx(m, tmp_path / "dec.onnx", batch=1)
    assert dec["recurrent"]["batch"] == 1 and "batch" not in dyn["recurrent"]
    g = onnx.load(tmp_path / "dec.onnx").graph
    assert all(d.HasField("dim_value") for i in g.input for d in i.type.tensor_type.shape.dim)
    assert dec["nodes"] == len(g.node) < len(onnx.load(tmp_path / "dyn.onnx").graph.node) == dyn["nodes"]
    assert step_greedy_ort(tmp_path / "dec.onnx", [1, 2], 8) == torch_greedy(m, [1, 2], 8)
    # a batch of sequences is fed to the static graph one slice at a time, with the same logits
    tokens = np.random.default_rng(2).integers(0, 256, size=(3, 6))
    art = Artifact("onnx", path=tmp_path / "dec.onnx", meta={"recurrent": dec["recurrent"]})
    logits, stats = run_sequence(get_runtime("onnxruntime", threads=1).load(art), dec["recurrent"], tokens)
    ref, _ = run_sequence(get_runtime("onnxruntime", threads=1).load(
        Artifact("onnx", path=tmp_path / "dyn.onnx", meta={"recurrent": dyn["recurrent"]})), dyn["recurrent"], tokens)
    assert logits.shape == (3, 6, 256) and np.allclose(logits, ref, atol=1e-5) and stats["steps"] == 6


def test_export_step_config_refuses_a_batch_that_is_not_a_positive_integer():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(EdgesmithError, match="batch"):
            ExportStepOnnxConfig(batch=bad)
    assert ExportStepOnnxConfig(batch=1).batch == 1


@pytest.mark.parametrize("scale_block", [0, 16])
def test_vq_layers_as_8bit_matmulnbits_give_the_gather_forms_logits(tmp_path, scale_block):
    # every dequantized VQ weight is an 8-bit codebook code x scale + offset (times its normalisation scale), so
    # the int8 form is exact up to float rounding
    m = tiny(7)
    q, rep = quantize_rwkv(m, CALIB, make_config("rwkvquant", bits=4, group_size=32, sq_percentile=60.0,
                                                 kmeans_iters=3, n_calibration=4, vq_scale_block=scale_block))
    gather = export_step_onnx(q, tmp_path / "g.onnx", accuracy_level=0)
    int8 = export_step_onnx(q, tmp_path / "i.onnx", accuracy_level=0, vq_form="int8")
    assert int8["vq_int8"] == gather["vq_gather"] == rep.extra["n_vq"] > 0 and int8["vq_gather"] == 0
    nbits = [n for n in onnx.load(tmp_path / "i.onnx").graph.node if n.op_type == "MatMulNBits"]
    assert sorted({a.i for n in nbits for a in n.attribute if a.name == "bits"}) == [4, 8]
    tokens = np.random.default_rng(3).integers(0, 256, size=(2, 8))
    outs = []
    for name, res in (("g", gather), ("i", int8)):
        art = Artifact("onnx", path=tmp_path / f"{name}.onnx", meta={"recurrent": res["recurrent"]})
        outs.append(run_sequence(get_runtime("onnxruntime", threads=1).load(art), res["recurrent"], tokens)[0])
    assert np.allclose(outs[0], outs[1], atol=1e-4)
    with pytest.raises(EdgesmithError, match="vq_form"):
        ExportStepOnnxConfig(vq_form="lut")
