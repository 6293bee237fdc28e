"""ONNX export of the RWKV step: onnxruntime decodes the same tokens as torch, fp32 and quantized."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from edgesmith.compress.rwkvquant import make_config, quantize_rwkv
from edgesmith.compress.rwkvquant.export import OrtStepDecoder, export_step_onnx, torch_greedy
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model

CALIB = np.random.default_rng(0).integers(0, 256, size=(4, 32))


def tiny(version: int):
    torch.manual_seed(version)
    m = build_model(RWKVConfig(version=version, n_layer=2, n_embd=64, head_size=16)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


@pytest.mark.parametrize("version", [6, 7])
def test_fp32_step_graph_gives_torch_logits_and_tokens(tmp_path, version):
    m = tiny(version)
    export_step_onnx(m, tmp_path / "fp.onnx", accuracy_level=0)
    dec = OrtStepDecoder(tmp_path / "fp.onnx")
    logits, _ = dec.step(7, dec.zero_state())
    with torch.no_grad():
        ref, _ = m.step(torch.tensor([7]), m.zero_state(1))
    assert np.allclose(logits, ref[0].numpy(), atol=1e-4)
    assert dec.greedy([1, 2, 3], 12) == torch_greedy(m, [1, 2, 3], 12)


def test_quantized_step_graph_uses_matmulnbits_and_vq_gather_and_matches_torch(tmp_path):
    m = tiny(7)
    q, rep = quantize_rwkv(m, CALIB, make_config("rwkvquant", bits=4, group_size=32, sq_percentile=60.0,
                                                 kmeans_iters=3, n_calibration=4))
    counts = export_step_onnx(q, tmp_path / "q.onnx", accuracy_level=0)
    assert counts["matmulnbits"] == rep.extra["n_sq"] and counts["vq_gather"] == rep.extra["n_vq"] > 0
    ops = {n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node}
    assert {"MatMulNBits", "Gather"} <= ops
    dec = OrtStepDecoder(tmp_path / "q.onnx")
    logits, _ = dec.step(5, dec.zero_state())
    with torch.no_grad():
        ref, _ = q.step(torch.tensor([5]), q.zero_state(1))
    assert np.allclose(logits, ref[0].numpy(), atol=1e-3)
    assert dec.greedy([4, 5], 12) == torch_greedy(q, [4, 5], 12)
