"""RWKV-6/7: the parallel (chunked / sequence) form and the recurrent step give the same logits."""
from __future__ import annotations

import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.rwkv6 import wkv6_chunked, wkv6_recurrent
from edgesmith.models.rwkv.rwkv7 import wkv7_chunked, wkv7_scan


@pytest.mark.parametrize("version", [6, 7])
def test_step_form_equals_parallel_form_logits_and_state(version, random_rwkv):
    m = random_rwkv(version)
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        par, par_state = m(idx)
        st, outs = m.zero_state(2), []
        for t in range(idx.shape[1]):
            logits, st = m.step(idx[:, t], st)
            outs.append(logits)
    step = torch.stack(outs, dim=1)
    assert torch.allclose(par, step, atol=1e-4, rtol=1e-4), (par - step).abs().max()
    for a, b in zip(par_state, st):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("version", [6, 7])
def test_parallel_form_continues_from_a_carried_state(version, random_rwkv):
    m = random_rwkv(version, seed=2)
    idx = torch.randint(0, 256, (1, 37), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        whole, _ = m(idx)
        first, st = m(idx[:, :20])
        second, _ = m(idx[:, 20:], st)
    assert torch.allclose(whole, torch.cat([first, second], dim=1), atol=1e-4, rtol=1e-4)


def _wkv6_inputs(T, dtype, seed=0):
    # log-decays down to about -e^7 per step: a cumulative-product chunked form overflows in fp32, and one built on
    # differences of running sums loses the small exponents to the rounding of a large prefix
    g = torch.Generator().manual_seed(seed)
    B, H, N = 2, 3, 8
    r, k, v = (torch.randn(B, T, H, N, generator=g, dtype=dtype) for _ in range(3))
    logw = -torch.exp(torch.randn(B, T, H, N, generator=g, dtype=dtype) * 2 + 1)
    return r, k, v, logw, torch.randn(H, N, generator=g, dtype=dtype), torch.randn(B, H, N, N, generator=g, dtype=dtype)


def _wkv7_inputs(T, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    B, H, N = 2, 3, 16
    r, k, v = (torch.randn(B, T, H, N, generator=g, dtype=dtype) for _ in range(3))
    w = -torch.nn.functional.softplus(-torch.randn(B, T, H, N, generator=g, dtype=dtype) * 3) - 0.5
    if T >= 64:  # the precision case: RWKV-7's bound, w = -0.5 everywhere, the largest e^-g factor the WY form meets
        w = torch.full_like(w, -0.5)
    kk = torch.nn.functional.normalize(torch.randn(B, T, H, N, generator=g, dtype=dtype), dim=-1)
    a = torch.rand(B, T, H, N, generator=g, dtype=dtype)
    return r, -torch.exp(w), k, v, kk, a, torch.randn(B, H, N, N, generator=g, dtype=dtype)


WKV = {6: (wkv6_recurrent, wkv6_chunked, _wkv6_inputs), 7: (wkv7_scan, wkv7_chunked, _wkv7_inputs)}


@pytest.mark.parametrize("version", [6, 7])
@pytest.mark.parametrize("T", [1, 16, 45])
def test_chunked_wkv_is_the_token_by_token_one_exactly_in_float64(version, T):
    # T = 45 leaves a partial last chunk, padded with tokens that must not touch the state
    token_by_token, chunked, inputs = WKV[version]
    args = inputs(T, torch.float64)
    y1, s1 = token_by_token(*args)
    y2, s2 = chunked(*args)
    assert y2.shape == y1.shape
    assert torch.allclose(y1, y2, atol=1e-11, rtol=0) and torch.allclose(s1, s2, atol=1e-11, rtol=0)


@pytest.mark.parametrize("version", [6, 7])
def test_chunked_wkv_keeps_the_token_by_token_float32_precision_at_strong_decays(version):
    token_by_token, chunked, inputs = WKV[version]
    args = inputs(128, torch.float64)
    exact = token_by_token(*args)
    f32 = [t.float() for t in args]
    worst = lambda fn: max((o.double() - e).abs().max() for o, e in zip(fn(*f32), exact))  # noqa: E731
    assert torch.isfinite(chunked(*f32)[0]).all()
    assert worst(chunked) < 3 * worst(token_by_token) + 1e-6


@pytest.mark.parametrize("version", [6, 7])
def test_chunked_wkv_gradients_match_the_token_by_token_ones(version):
    token_by_token, chunked, inputs = WKV[version]
    leaves = [t.requires_grad_() for t in inputs(40, torch.float64, seed=4)]
    grads = []
    for fn in (token_by_token, chunked):
        y, s = fn(*leaves)
        grads.append(torch.autograd.grad(y.sin().sum() + s.cos().sum(), leaves))
    for g1, g2 in zip(*grads):
        assert torch.allclose(g1, g2, atol=1e-10, rtol=1e-8)


def test_out_of_vocabulary_tokens_are_rejected_clearly(random_rwkv):
    m = random_rwkv(7)
    with pytest.raises(EdgesmithError, match="token ids must lie in"):
        m(torch.tensor([[0, 300]]))


def test_config_rejects_width_not_divisible_by_head_size():
    with pytest.raises(EdgesmithError, match="multiple of head_size"):
        RWKVConfig(version=6, n_embd=100, head_size=32)
