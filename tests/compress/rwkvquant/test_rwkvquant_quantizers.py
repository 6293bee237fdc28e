"""RTN / GPTQ / GPTVQ / codebook quantizers: error bounds, bit accounting, packing, proxies."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.compress.rwkvquant.codebook import optimise_codebook, weighted_error
from edgesmith.compress.rwkvquant.gptq import gptq_quantize
from edgesmith.compress.rwkvquant.gptvq import gptvq_quantize
from edgesmith.compress.rwkvquant.proxies import coarse_proxy, decide, fine_proxy, max_over_rms
from edgesmith.compress.rwkvquant.rtn import rtn_quantize
from edgesmith.compress.rwkvquant.rwkvquant import hessian_error
from edgesmith.compress.rwkvquant.tensors import pack_bits, unpack_bits


@pytest.fixture
def layer():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 64, generator=g) @ torch.randn(64, 64, generator=g) * 0.3 + 0.5
    w = torch.randn(48, 64, generator=g) * 0.05
    return w, 2 * x.t() @ x / len(x)


@pytest.mark.parametrize("bits", [3, 4])
def test_rtn_error_is_at_most_half_a_step_per_weight(layer, bits):
    w, _ = layer
    q = rtn_quantize(w, bits, 16)
    step = q.scales.to(torch.float32).repeat_interleave(16, dim=1)
    assert torch.all((w - q.dequantize()).abs() <= step / 2 + 1e-6)
    assert int(q.codes.max()) < 2**bits


def test_rtn_bits_per_weight_counts_codes_scales_and_zeros(layer):
    w, _ = layer
    q = rtn_quantize(w, 3, 16)
    n_groups = 48 * 4
    assert q.storage_bits() == 48 * 64 * 3 + n_groups * (16 + 3)
    assert q.storage_bits() / q.n_weights == pytest.approx(3 + 19 / 16)


def test_gptq_beats_rtn_on_output_error_and_uses_the_same_bits(layer):
    w, H = layer
    r, g = rtn_quantize(w, 3, 16), gptq_quantize(w, H, 3, 16, block_size=32)
    assert g.storage_bits() == r.storage_bits()
    assert hessian_error(w, g.dequantize(), H) < 0.8 * hessian_error(w, r.dequantize(), H)


def test_gptvq_bits_count_indices_and_8bit_codebooks(layer):
    w, H = layer
    q = gptvq_quantize(w, H, 2, dim=2, group_size=48 * 16, iters=10)
    n_groups = 64 // q.group_cols
    assert q.group_cols == 16 and q.codebook_codes.shape == (n_groups, 16, 2)
    assert q.storage_bits() == 48 * 32 * 4 + n_groups * (16 * 2 * 8 + 32)
    # every dequantized vector is one of its group's codebook entries
    cb = q.codebooks()
    deq = q.dequantize().reshape(48, 32, 2)
    assert torch.equal(deq[:, 0], cb[0][q.indices[:, 0]])


def test_gptvq_output_error_is_below_rtn_at_similar_bits(layer):
    w, H = layer
    v = gptvq_quantize(w, H, 3, dim=2, group_size=1536, iters=20)
    r = rtn_quantize(w, 3, 16)
    assert v.storage_bits() <= r.storage_bits() * 1.05
    assert hessian_error(w, v.dequantize(), H) < hessian_error(w, r.dequantize(), H)


def test_weighted_codebook_lowers_the_weighted_error_of_a_vector():
    g = torch.Generator().manual_seed(1)
    mu = torch.rand(256, generator=g)
    imp = torch.ones(256)
    imp[:32] = 100.0  # a few channels carry most of the activation energy
    weighted = optimise_codebook(mu, imp, bits=3)
    plain = optimise_codebook(mu, None, bits=3)
    assert weighted.indices.max() < 8 and weighted.storage_bits() == 256 * 3 + 8 * 8 + 32
    assert weighted_error(mu, weighted.dequantize(), imp) < weighted_error(mu, plain.dequantize(), imp)


@pytest.mark.parametrize("bits", [1, 3, 6, 12])
def test_bit_packing_round_trips_and_is_dense(bits):
    v = np.random.default_rng(bits).integers(0, 2**bits, size=1001)
    packed = pack_bits(v, bits)
    assert len(packed) == -(-1001 * bits // 8)
    assert np.array_equal(unpack_bits(packed, bits, 1001), v)


def test_proxies_are_zero_for_uniform_spacing_and_large_with_outliers():
    uniform = torch.linspace(-1, 1, 4096)
    outliers = torch.cat([torch.randn(4090, generator=torch.Generator().manual_seed(0)) * 0.01,
                          torch.tensor([5.0, -5.0, 4.0, -4.0, 3.0, -3.0])])
    assert coarse_proxy(uniform) == pytest.approx(0, abs=1e-6) and fine_proxy(uniform) == pytest.approx(0, abs=1e-6)
    assert coarse_proxy(outliers) > 1 and fine_proxy(outliers) > 100
    assert max_over_rms(outliers) > max_over_rms(uniform)
    assert decide(0.5, 1.0, 1.0, 10.0)[0] == "sq"
    assert decide(0.5, 20.0, 1.0, 10.0)[0] == "vq" and decide(2.0, 1.0, 1.0, 10.0)[0] == "vq"
