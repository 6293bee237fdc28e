"""RTN / GPTQ / GPTVQ / codebook quantizers: error bounds, bit accounting, packing, proxies."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.compress.rwkvquant.codebook import optimise_codebook, weighted_error
from edgesmith.compress.rwkvquant.gptq import gptq_quantize
from edgesmith.compress.rwkvquant.gptvq import _fit_codebooks, _quantize_columns, gptvq_quantize, update_codebooks, vq_layout
from edgesmith.compress.rwkvquant.proxies import coarse_proxy, decide, fine_proxy, max_over_rms
from edgesmith.compress.rwkvquant.rtn import rtn_quantize
from edgesmith.compress.rwkvquant.rwkvquant import hessian_error
from edgesmith.compress.rwkvquant.tensors import (dequantize_log_scales, pack_bits, quantize_log_scales,
                                                  scale_block_index, unpack_bits)


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


@pytest.mark.parametrize("bits", [3, 4])
def test_symmetric_rtn_keeps_half_a_step_and_stores_no_zero_points(layer, bits):
    w, _ = layer
    q = rtn_quantize(w, bits, 16, symmetric=True)
    step = q.scales.to(torch.float32).repeat_interleave(16, dim=1)
    # the largest weight sits half a step above the top code, plus up to 2^b - 1 times the fp16 rounding of the scale
    assert torch.all((w - q.dequantize()).abs() <= step / 2 * (1 + 2**-6) + 1e-6)
    assert q.symmetric and torch.all(q.zeros == 2 ** (bits - 1))
    # the zero point is implied, so only codes and fp16 scales count
    assert q.storage_bits() == 48 * 64 * bits + 48 * 4 * 16
    assert not rtn_quantize(w, bits, 16).symmetric


def test_gptq_beats_rtn_on_output_error_and_uses_the_same_bits(layer):
    w, H = layer
    r, g = rtn_quantize(w, 3, 16), gptq_quantize(w, H, 3, 16, block_size=32)
    assert g.storage_bits() == r.storage_bits()
    assert hessian_error(w, g.dequantize(), H) < 0.8 * hessian_error(w, r.dequantize(), H)


def test_gptvq_bits_count_indices_and_8bit_codebooks(layer):
    w, H = layer
    q = gptvq_quantize(w, H, 2, dim=2, group_size=48 * 16, iters=10)
    # 64 columns (< the paper's 256) form one column group; 48 x 64 / 768 = 4 codebooks of 12 rows each
    assert (q.group_cols, q.group_rows) == (64, 12) and q.codebook_codes.shape == (4, 16, 2)
    assert q.storage_bits() == 48 * 32 * 4 + 4 * (16 * 2 * 8 + 32)
    # every dequantized vector is an entry of its own row block's codebook
    cb, book = q.codebooks(), q.book_of()
    deq = q.dequantize().reshape(48, 32, 2)
    assert torch.equal(book[:, 0], torch.arange(48) // 12)
    assert torch.equal(deq, cb[book, q.indices])


def test_vq_layout_is_the_papers_column_groups_with_even_row_blocks():
    assert vq_layout(3072, 768, 2, 3557) == (256, 14)  # 256 columns, 3072 * 256 / 3557 = 221 blocks of 14 rows
    assert vq_layout(768, 3072, 2, 13210) == (256, 52)
    assert vq_layout(128, 128, 2, 13210) == (128, 128)  # one codebook: 1.24 budgeted, a second would be 0.24 full
    assert vq_layout(128, 300, 2, 4096) == (150, 26)  # 300 columns: two even groups of 150, not 256 + 44; 5 row blocks


@pytest.mark.parametrize("scaled", [False, True])
def test_gptvq_column_loop_matches_a_transcription_of_the_joint_update(scaled):
    # the Numba loop against the update written out in torch: nearest weighted centroid of the row's codebook
    # to the weights over their scales, Q = centroid x scale, E = (W_b - Q_b) U_bb^-1, W[:, later] -= E U[b, later]
    g = torch.Generator().manual_seed(3)
    rows, width, d, k = 10, 8, 2, 4
    wb = torch.randn(rows, width, generator=g, dtype=torch.float64)
    ub = torch.triu(torch.randn(width, width, generator=g, dtype=torch.float64)) + 3 * torch.eye(width, dtype=torch.float64)
    imp = torch.rand(width, generator=g, dtype=torch.float64) + 0.5
    cbs = torch.randn(2, d, k, generator=g, dtype=torch.float64)
    book = np.arange(rows) // 5
    sc = torch.ones(rows, width, dtype=torch.float64)
    if scaled:  # one scale per row and run of 4 columns, as blockwise normalisation lays them out
        sc = (torch.rand(rows, width // 4, generator=g, dtype=torch.float64) * 3 + 0.1).repeat_interleave(4, 1)
    ref, ref_idx = wb.clone(), torch.zeros(rows, width // d, dtype=torch.int64)
    for j in range(0, width, d):
        c = cbs[torch.from_numpy(book)]  # (rows, d, k)
        dist = ((ref[:, j:j + d, None] / sc[:, j:j + d, None] - c) ** 2 * imp[j:j + d, None]).sum(1)
        a = dist.argmin(1)
        q = c[torch.arange(rows), :, a] * sc[:, j:j + d]
        e = torch.linalg.solve_triangular(ub[j:j + d, j:j + d], ref[:, j:j + d] - q, upper=True, left=False)
        ref[:, j + d:] -= e @ ub[j:j + d, j + d:]
        ref[:, j:j + d], ref_idx[:, j // d] = q, a
    out, err, idx = wb.numpy().copy(), np.zeros((rows, width)), np.zeros((rows, width // d), np.int64)
    _quantize_columns(out, ub.numpy(), imp.numpy(), cbs.numpy(), book, sc.numpy(), err, idx)
    assert np.array_equal(idx, ref_idx.numpy())
    np.testing.assert_allclose(out, ref.numpy(), rtol=0, atol=1e-12)


def test_gptvq_codebooks_recover_separated_clusters_and_weighted_means():
    g = np.random.default_rng(0)
    centers = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 3.0], [0.0, -3.0]])
    x = np.concatenate([c + 0.05 * g.standard_normal((200, 2)) for c in centers])
    wt = g.uniform(0.5, 2.0, x.shape)
    cbs, ran = _fit_codebooks(x, wt, np.array([0, len(x)], np.int64), 4, 100)
    found = cbs[0].T  # (k, d)
    assert ran[0] < 100  # stopped because no assignment changed
    for c in centers:
        j = np.argmin(((found - c) ** 2).sum(1))
        members = np.argmin((((x[:, None] - found[None]) ** 2) * wt[:, None]).sum(2), 1) == j
        np.testing.assert_allclose(found[j], (wt[members] * x[members]).sum(0) / wt[members].sum(0), atol=1e-9)
        assert np.abs(found[j] - c).max() < 0.05


def test_gptvq_codebook_update_lowers_the_output_error_and_keeps_assignments(layer):
    w, H = layer
    plain = gptvq_quantize(w, H, 2, dim=2, group_size=768, iters=20, codebook_update_steps=0)
    new, info = update_codebooks(plain, w, H, steps=10)
    assert info["kept"] and info["error_after"] < info["error_before"]
    assert torch.equal(new.indices, plain.indices)
    assert hessian_error(w, new.dequantize(), H) < hessian_error(w, plain.dequantize(), H)
    assert new.storage_bits() == plain.storage_bits()


def test_gptvq_output_error_is_below_rtn_at_similar_bits(layer):
    w, H = layer
    v = gptvq_quantize(w, H, 3, dim=2, group_size=1536, iters=20)
    r = rtn_quantize(w, 3, 16)
    assert v.storage_bits() <= r.storage_bits() * 1.05
    assert hessian_error(w, v.dequantize(), H) < hessian_error(w, r.dequantize(), H)


def test_log_scales_sit_on_each_columns_log_grid_and_stand_in_for_zero_runs():
    g = torch.Generator().manual_seed(5)
    s = torch.exp(torch.randn(40, 6, generator=g, dtype=torch.float64) * 2)
    s[3, 2] = 0.0  # an all-zero run
    codes, lo, step = quantize_log_scales(s, 4)
    assert codes.dtype == torch.uint8 and int(codes.max()) == 15 and lo.dtype == step.dtype == torch.float16
    deq = dequantize_log_scales(codes, lo, step).to(torch.float64)
    pos = s > 0
    # within half a grid step in log2 (plus the fp16 rounding of the grid's ends, 15 steps' worth at most)
    slack = step.to(torch.float64) / 2 + 16 * 2.0**-10 * (lo.abs().to(torch.float64) + 15 * step.to(torch.float64))
    assert torch.all((torch.log2(deq) - torch.log2(s)).abs()[pos] <= slack.expand_as(s)[pos])
    assert deq[3, 2] == deq[:, 2][codes[:, 2] == 0][0]  # the zero run takes its column's smallest scale


def test_scale_blocks_are_runs_inside_each_column_group():
    assert scale_block_index(10, 5, 2).tolist() == [0, 0, 1, 1, 2, 3, 3, 4, 4, 5]
    assert scale_block_index(8, 8, 4).tolist() == [0] * 4 + [1] * 4


def test_normalised_gptvq_counts_its_scales_and_beats_plain_gptvq_on_rows_of_unequal_size(layer):
    w, H = layer
    w = w * torch.logspace(-1, 1, 48)[:, None]  # rows two decades apart: one codebook cannot serve them all
    plain = gptvq_quantize(w, H, 3, dim=2, group_size=48 * 16, iters=20)
    norm = gptvq_quantize(w, H, 3, dim=2, group_size=48 * 32, iters=20, scale_block=16)
    assert norm.scale_codes.shape == (48, 4) and norm.codebook_codes.shape[0] == 2
    # indices, two 64-centroid codebooks, a 4-bit scale per row and run, an fp16 grid (lowest, step) per run
    assert norm.storage_bits() == 48 * 32 * 6 + 2 * (64 * 2 * 8 + 32) + 48 * 4 * 4 + 4 * 2 * 16
    assert norm.storage_bits() < plain.storage_bits()  # half the codebooks pay for the scales
    # every weight is its row block's centroid times its own scale
    cb = norm.codebooks()[norm.book_of(), norm.indices].reshape(48, 64)
    assert torch.equal(norm.dequantize(), cb * norm.scales())
    assert hessian_error(w, norm.dequantize(), H) < 0.75 * hessian_error(w, plain.dequantize(), H)
    with pytest.raises(ValueError, match="multiple of the VQ dimension"):
        gptvq_quantize(w, H, 2, dim=2, scale_block=3)


def test_codebook_update_moves_centroids_under_their_scales(layer):
    w, H = layer
    w = w * torch.logspace(-1, 1, 48)[:, None]
    plain = gptvq_quantize(w, H, 2, dim=2, group_size=768, iters=20, codebook_update_steps=0, scale_block=16)
    new, info = update_codebooks(plain, w, H, steps=10)
    assert info["kept"] and torch.equal(new.indices, plain.indices) and torch.equal(new.scale_codes, plain.scale_codes)
    # the error it reports is the error of the stored, scaled weights
    assert info["error_after"] == pytest.approx(((new.dequantize() - w) @ H * (new.dequantize() - w)).sum().item(), rel=1e-5)


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
