"""Block-sequential calibration: each block's Hessians come from the quantized blocks before it."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress.rwkvquant import make_config, quantize_rwkv
from edgesmith.compress.rwkvquant.gptq import gptq_quantize
from edgesmith.compress.rwkvquant.rwkvquant import (SHIFT_VECTORS, advance_inputs, block_inputs, collect_calibration,
                                                    linear_modules)
from rwkv_helpers import tiny, weights_of

CALIB = np.random.default_rng(1).integers(0, 256, size=(4, 32))
FAST = dict(kmeans_iters=5, n_calibration=4, bits=2, group_size=32)


@pytest.mark.parametrize("version", [6, 7])
def test_one_block_calibration_matches_the_full_pass_and_runs_no_later_block(version):
    m = tiny(version, n_layer=3)
    full_H, full_imp = collect_calibration(m, CALIB)
    ran = []
    hooks = [blk.ffn.register_forward_hook(lambda *a, i=i: ran.append(i)) for i, blk in enumerate(m.blocks)]
    try:
        H, imp = collect_calibration(m, CALIB, block=1)
    finally:
        for h in hooks:
            h.remove()
    # blocks 0 and 1 run, block 2 (and the head) never does: a late block would cost a whole pass each
    assert sorted(set(ran)) == [0, 1]
    assert set(H) == {n for n in full_H if n.startswith("blocks.1.")}
    assert set(imp) == {"blocks.1.att", "blocks.1.ffn"}
    for n in H:
        torch.testing.assert_close(H[n], full_H[n])
    for k in imp:
        torch.testing.assert_close(imp[k], full_imp[k])


@pytest.mark.parametrize("version", [6, 7])
def test_kept_residual_streams_give_the_full_forwards_calibration_running_one_block(version):
    m = tiny(version, n_layer=3)
    m.init_wkv = 0.1 * torch.randn(3, *m.zero_state(1).wkv.shape[2:])  # a state-tuned start reaches every block
    inputs = block_inputs(m, CALIB, batch=3)  # two batches, the second short
    advance_inputs(m, 0, inputs)
    advance_inputs(m, 1, inputs)
    ran = []
    hooks = [blk.ffn.register_forward_hook(lambda *a, i=i: ran.append(i)) for i, blk in enumerate(m.blocks)]
    try:
        H, imp = collect_calibration(m, CALIB, batch=3, block=2, inputs=inputs)
    finally:
        for h in hooks:
            h.remove()
    assert ran == [2, 2]  # the sequential path's point: block i costs one block pass, not i + 1
    # the reference is the model's own forward over every block (the full pass), not the block path again
    ref_H, ref_imp = collect_calibration(m, CALIB, batch=3)
    assert set(H) == {n for n in ref_H if n.startswith("blocks.2.")}
    assert set(imp) == {"blocks.2.att", "blocks.2.ffn"}
    for n in H:
        torch.testing.assert_close(H[n], ref_H[n], rtol=1e-6, atol=1e-9)
    for k in imp:
        torch.testing.assert_close(imp[k], ref_imp[k], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("version", [6, 7])
def test_sequential_gptq_calibrates_each_block_on_the_quantized_blocks_before_it(version):
    m = tiny(version, n_layer=3)
    one_pass = weights_of(quantize_rwkv(m, CALIB, make_config("gptq", **FAST))[0])
    seq_model, rep = quantize_rwkv(m, CALIB, make_config("gptq", sequential=True, **FAST))
    seq = weights_of(seq_model)
    assert rep.extra["calibration"] == "block-sequential"
    # block 0 sees the fp embedding either way
    for n in (n for n in seq if n.startswith("blocks.0.")):
        assert torch.equal(seq[n], one_pass[n]), n
    # block 1 by hand: the fp model with block 0 as the sequential run left it (linears and vectors)
    partial = copy.deepcopy(m)
    for n, mod in linear_modules(seq_model).items():
        if n.startswith("blocks.0."):
            parent, _, attr = n.rpartition(".")
            setattr(partial.get_submodule(parent), attr, mod)
    with torch.no_grad():
        for part, names in SHIFT_VECTORS[version].items():
            for v in names:
                getattr(getattr(partial.blocks[0], part), v).copy_(getattr(getattr(seq_model.blocks[0], part), v))
    H1, _ = collect_calibration(partial, CALIB, block=1)
    fp_H1, _ = collect_calibration(m, CALIB, block=1)
    name = "blocks.1.att.key"
    assert not torch.allclose(H1[name], fp_H1[name])  # block 0's quantization reaches block 1's inputs
    for n in H1:
        expect = gptq_quantize(m.get_submodule(n).weight.detach(), H1[n], 2, 32).dequantize()
        assert torch.equal(seq[n], expect), n
    assert any(not torch.equal(seq[n], one_pass[n]) for n in H1)


def test_sequential_rwkvquant_keeps_the_decision_and_the_bits():
    m = tiny(7, n_layer=3)
    a_model, a = quantize_rwkv(m, CALIB, make_config("rwkvquant", sq_percentile=60.0, **FAST))
    b_model, b = quantize_rwkv(m, CALIB, make_config("rwkvquant", sq_percentile=60.0, sequential=True, **FAST))
    # the SQ/VQ decision reads the weights only; what changes is the Hessians each quantizer is given
    assert {x.name: x.action for x in a.layers} == {x.name: x.action for x in b.layers}
    assert a.bits_per_weight == b.bits_per_weight and a.extra["n_vq"] == b.extra["n_vq"] > 0
    x = torch.as_tensor(CALIB[:2])
    assert torch.isfinite(b_model(x)[0]).all()


def test_sequential_must_be_a_boolean():
    with pytest.raises(EdgesmithError, match="sequential"):
        make_config("gptq", sequential="yes")
