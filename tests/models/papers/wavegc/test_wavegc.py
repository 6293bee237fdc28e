"""WaveGC: admissibility of the learned wavelets, the scale cut-off, equivariance, packing, reproducibility."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.wavegc.config import DataConfig, TrainConfig, WaveGCConfig
from edgesmith.models.papers.wavegc.data import N_FEATURES, load_splits, make_graph, normalized_laplacian_eigs, pack, unpack
from edgesmith.models.papers.wavegc.train import train
from edgesmith.models.papers.wavegc.wavegc import (WaveGC, apply_filter, filter_matrices, row_norms, scaling_function,
                                  wavelet_functions)


def _random_coeffs(gen, b=5, k=4, j=3):
    a = torch.rand(b, k, generator=gen)
    bb = torch.rand(b, k, generator=gen)
    s = torch.rand(b, j, generator=gen) * 10
    return a / a.sum(-1, keepdim=True), bb / bb.sum(-1, keepdim=True), s


def test_scaling_function_is_one_at_zero_for_random_normalised_coefficients():
    gen = torch.Generator().manual_seed(0)
    a, _, _ = _random_coeffs(gen)
    lam = torch.zeros(5, 3)
    assert torch.allclose(scaling_function(lam, a), torch.ones(5, 3), atol=1e-6)


def test_admissible_wavelets_vanish_at_zero_and_the_ablation_does_not():
    gen = torch.Generator().manual_seed(1)
    _, b, s = _random_coeffs(gen)
    lam = torch.zeros(5, 2)
    assert torch.allclose(wavelet_functions(lam, b, s, admissible=True), torch.zeros(5, 2, 3), atol=1e-6)
    # the non-admissible ablation keeps the DC component: g(0) = 1
    assert torch.allclose(wavelet_functions(lam, b, s, admissible=False), torch.ones(5, 2, 3), atol=1e-6)


def test_wavelet_is_zero_exactly_where_scale_times_eigenvalue_exceeds_two():
    gen = torch.Generator().manual_seed(2)
    _, b, s = _random_coeffs(gen)
    lam = torch.linspace(0, 2, 41).repeat(5, 1)
    for admissible in (True, False):
        g = wavelet_functions(lam, b, s, admissible=admissible)
        beyond = lam[:, :, None] * s[:, None, :] > 2
        assert beyond.any() and (~beyond).any()
        assert torch.all(g[beyond] == 0)
        assert torch.any(g[~beyond & (lam[:, :, None] > 0)] != 0)


def _packed_graph(n=10, nmax=12, seed=0):
    rng = np.random.default_rng(seed)
    adj = make_graph(n, ring=True, rng=rng)
    lam, u = normalized_laplacian_eigs(adj)
    x = rng.standard_normal((n, N_FEATURES)).astype(np.float32)
    return x, lam, u, pack(x, lam, u, nmax)


def test_pack_unpack_round_trip_restores_features_mask_and_eigenpairs():
    x, lam, u, p = _packed_graph()
    xs, mask, ls, us = (t.numpy() for t in unpack(torch.from_numpy(p[None]), N_FEATURES))
    n = len(x)
    np.testing.assert_array_equal(xs[0, :n], x)
    np.testing.assert_array_equal(mask[0], np.r_[np.ones(n), np.zeros(2)])
    np.testing.assert_allclose(ls[0, :n], lam, atol=1e-6)
    np.testing.assert_allclose(us[0, :n, :n], u, atol=1e-6)
    assert not xs[0, n:].any() and not us[0, n:].any() and not us[0, :, n:].any()
    # the eigenpairs still rebuild the normalised Laplacian after the float32 packing
    lap = us[0, :n, :n] @ np.diag(ls[0, :n]) @ us[0, :n, :n].T
    assert np.allclose(lap, lap.T, atol=1e-5) and np.allclose(np.diag(lap), 1.0, atol=1e-5)


def test_pack_rejects_a_graph_larger_than_the_padded_size():
    x, lam, u, _ = _packed_graph(n=10)
    with pytest.raises(EdgesmithError, match="at most 8"):
        pack(x, lam, u, 8)


def test_bad_config_values_are_user_errors():
    with pytest.raises(EdgesmithError, match="decay"):
        DataConfig(decay=1.5)
    with pytest.raises(EdgesmithError, match="max_nodes"):
        DataConfig(min_nodes=20, max_nodes=10)
    with pytest.raises(EdgesmithError, match="s_max"):
        WaveGCConfig(s_max=0)


def test_fast_filter_application_equals_the_explicit_row_normalised_matrix():
    _, _, _, p = _packed_graph()
    _, mask, lam, u = unpack(torch.from_numpy(p[None]).double(), N_FEATURES)
    vals = torch.rand(1, 12, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * mask[..., None]
    y = torch.randn(1, 12, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    explicit = filter_matrices(u, vals)  # (1, 4, N, N)
    norms = row_norms(u, vals)
    for t in range(4):
        fast = apply_filter(u, vals[..., t : t + 1], norms[..., t : t + 1], y)
        assert torch.allclose(fast, explicit[:, t] @ y, atol=1e-9)


def test_model_is_permutation_equivariant_over_real_nodes():
    torch.manual_seed(0)
    model = WaveGC(WaveGCConfig(hidden=16, layers=2)).eval()
    x, lam, u, p = _packed_graph()
    perm = np.random.default_rng(5).permutation(len(x))
    # relabelling nodes permutes feature rows and eigenvector rows; eigenvalues are per eigenvector, unchanged
    p2 = pack(x[perm], lam, u[perm], 12)
    with torch.no_grad():
        out = model(torch.from_numpy(p[None]))[0].numpy()
        out2 = model(torch.from_numpy(p2[None]))[0].numpy()
    np.testing.assert_allclose(out2[: len(x)], out[perm], atol=1e-5)
    assert not out[len(x):].any() and not out2[len(x):].any()


def test_same_seed_gives_the_same_data_and_the_same_trained_weights():
    small = dict(n_train=16, n_test=2, min_nodes=8, max_nodes=10)
    cfg = DataConfig(**small, seed=3)
    a, b = load_splits(cfg), load_splits(cfg)
    np.testing.assert_array_equal(a["train"].packed, b["train"].packed)
    assert not np.array_equal(a["train"].y, load_splits(DataConfig(**small, seed=4))["train"].y)
    weights = []
    for _ in range(2):
        torch.manual_seed(0)
        m = WaveGC(WaveGCConfig(hidden=8, layers=1))
        train(m, a["train"], TrainConfig(epochs=1, batch=8, seed=7))
        weights.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert torch.equal(weights[0], weights[1])


def test_target_has_long_range_nodes_beyond_a_three_layer_receptive_field():
    test = load_splits(DataConfig(n_train=1, n_test=8))["test"]
    far = (test.hops > 3) & (test.mask > 0)
    # most nodes are out of reach of a 3-layer GCN, and their targets still carry source signal
    assert far.sum() > 0.7 * test.mask.sum()
    assert np.abs(test.y_long[far]).mean() > 0.1
