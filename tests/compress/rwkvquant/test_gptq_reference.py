"""GPTQ pinned to a transcription of the reference loop (IST-DASLab gptq.py, GPTQ.fasterquant), code for code.

The transcription keeps the reference's structure: the block works on a copy W1 while group grids are fitted on
W (updated by earlier blocks only), static groups are fitted before any update, act-order permutes columns by
decreasing Hessian diagonal. One deliberate difference, applied to both sides: the grid's scale is rounded to
fp16, the precision it is stored and run in, so the error feedback sees the grid that gets deployed. With ``sym``
the reference leaves a group with no negative weight at min 0 (scale max/(2^b-1), zero point 2^(b-1): its upper half
clips); ours takes -max there too. The problems below have negative weights in every group, where the two agree.
"""
from __future__ import annotations

import pytest
import torch

from edgesmith.compress.rwkvquant.gptq import gptq_quantize
from edgesmith.compress.rwkvquant.tensors import fp16_round


def _find_params(x, maxq, sym=False):  # the reference Quantizer.find_params(weight=True), per row
    tmp = torch.zeros(x.shape[0], dtype=x.dtype)
    xmin = torch.minimum(x.min(1)[0], tmp)
    xmax = torch.maximum(x.max(1)[0], tmp)
    if sym:
        xmax = torch.maximum(torch.abs(xmin), xmax)
        tmp = xmin < 0
        if torch.any(tmp):
            xmin[tmp] = -xmax[tmp]
    both = (xmin == 0) & (xmax == 0)
    xmin[both], xmax[both] = -1, +1
    scale = fp16_round(((xmax - xmin) / maxq).float()).double()
    zero = torch.full_like(scale, (maxq + 1) / 2) if sym else torch.round(-xmin / scale)
    return scale, zero


def _quantize(x, scale, zero, maxq):
    q = torch.clamp(torch.round(x / scale) + zero, 0, maxq)
    return scale * (q - zero), q


def reference_gptq(W, H, bits, groupsize, blocksize=128, percdamp=0.01, actorder=False, static_groups=False, sym=False):
    W, H = W.clone().double(), H.clone().double()
    maxq = 2 ** bits - 1
    columns = W.shape[1]
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    if static_groups:
        groups = [_find_params(W[:, i:i + groupsize], maxq, sym) for i in range(0, columns, groupsize)]
    if actorder:
        perm = torch.argsort(torch.diag(H), descending=True)
        W, H = W[:, perm], H[perm][:, perm]
        invperm = torch.argsort(perm)
    Q = torch.zeros_like(W)
    damp = percdamp * torch.mean(torch.diag(H))
    diag = torch.arange(columns)
    H[diag, diag] += damp
    H = torch.linalg.cholesky(H)
    H = torch.cholesky_inverse(H)
    Hinv = torch.linalg.cholesky(H, upper=True)
    grid = None
    for i1 in range(0, columns, blocksize):
        i2 = min(i1 + blocksize, columns)
        count = i2 - i1
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for i in range(count):
            w = W1[:, i]
            d = Hinv1[i, i]
            if not static_groups:
                if (i1 + i) % groupsize == 0:
                    grid = _find_params(W[:, (i1 + i):(i1 + i + groupsize)], maxq, sym)
            else:
                idx = i1 + i
                if actorder:
                    idx = perm[idx]
                grid = groups[int(idx) // groupsize]
            _, q = _quantize(w.unsqueeze(1), grid[0][:, None], grid[1][:, None], maxq)
            Q1[:, i] = q.flatten()
            err1 = (w - _quantize(w.unsqueeze(1), grid[0][:, None], grid[1][:, None], maxq)[0].flatten()) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        Q[:, i1:i2] = Q1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])
    if actorder:
        Q = Q[:, invperm]
    return Q


def _problem(rows=24, cols=256, n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(rows, cols, generator=g, dtype=torch.float64) * (1 + torch.rand(cols, generator=g, dtype=torch.float64))
    X = torch.randn(n, cols, generator=g, dtype=torch.float64) @ (torch.eye(cols, dtype=torch.float64)
                                                                  + 0.3 * torch.randn(cols, cols, generator=g, dtype=torch.float64) / cols ** 0.5)
    X[:, 7] = 0  # a dead input, handled as the reference does
    return W, 2 * X.T @ X / n


@pytest.mark.parametrize("bits, group, block, act_order, static, sym", [
    (3, 64, 128, False, False, False),   # the default that used to differ: groups inside a 128-column block
    (4, 16, 32, False, False, False),
    (3, 256, 128, False, False, False),  # a group wider than a block
    (3, 64, 128, False, True, False),    # static groups
    (4, 64, 128, True, True, False),     # act-order with static groups
    (3, 256, 128, True, False, False),   # act-order, one group per row
    (4, 64, 128, False, False, True),    # symmetric grids
    (3, 64, 128, True, True, True),      # symmetric, act-order, static groups
])
def test_gptq_codes_equal_the_reference_loop(bits, group, block, act_order, static, sym):
    W, H = _problem()
    ours = gptq_quantize(W.float(), H.float(), bits, group, block_size=block, act_order=act_order, static_groups=static,
                         symmetric=sym)
    ref = reference_gptq(W.float(), H.float(), bits, group, blocksize=block, actorder=act_order, static_groups=static,
                         sym=sym)
    assert torch.equal(ours.codes.double(), ref)
    assert ours.symmetric == sym  # every zero point 2^(b-1) exactly when asked


@pytest.mark.parametrize("sym", [False, True])
def test_zero_rows_quantize_to_zero_as_in_the_reference(sym):
    # zero-initialised projections (RWKV's output and FFN value) used to get a scale that rounds to 0 in fp16,
    # so 0 / 0 codes and NaN weights
    W, H = _problem()
    W[3] = 0
    W[5, :64] = 0
    ours = gptq_quantize(W.float(), H.float(), 4, 64, symmetric=sym)
    assert torch.equal(ours.codes.double(), reference_gptq(W.float(), H.float(), 4, 64, sym=sym))
    deq = ours.dequantize()
    assert torch.isfinite(deq).all() and torch.equal(deq[3], torch.zeros(256))


def test_act_order_with_dynamic_groups_is_refused():
    W, H = _problem()
    with pytest.raises(ValueError, match="static_groups"):
        gptq_quantize(W.float(), H.float(), 3, 64, act_order=True)


def test_the_pass_configs_take_the_published_options_and_name_them():
    from edgesmith.common import EdgesmithError
    from edgesmith.compress.base import config_from_json
    from edgesmith.compress.rwkvquant.rwkvquant import GPTQConfig

    cfg = GPTQConfig(bits=3, act_order=True, static_groups=True)
    assert cfg.sq_label() == "gptq (act-order, static groups)" and GPTQConfig().sq_label() == "gptq"
    assert GPTQConfig(symmetric=True).sq_label() == "gptq (symmetric)"
    assert config_from_json(GPTQConfig(symmetric=True).to_json()).symmetric is True
    assert config_from_json(cfg.to_json()) == cfg
    with pytest.raises(EdgesmithError, match="static_groups"):
        GPTQConfig(act_order=True)
