"""LRNN data: espeak-ng speech + generated noise at set SNRs, fixed splits, STFT and SI-SNR."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.lrnn import data as D


@pytest.fixture(scope="module")
def tiny():
    return D.load_splits(D.DataConfig.tiny())


def test_tiny_splits_have_fixed_sizes_and_lengths(tiny):
    assert [len(tiny[k]) for k in ("train", "val", "test")] == [8, 4, 4]
    assert tiny["train"].noisy.shape == (8, 8000) and tiny["train"].noisy.dtype == np.float32


def test_splits_are_disjoint_and_reloaded_identically(tiny):
    assert not np.allclose(tiny["train"].clean[:4], tiny["test"].clean)
    again = D.load_splits(D.DataConfig.tiny())
    np.testing.assert_array_equal(again["test"].noisy, tiny["test"].noisy)


def test_mixtures_are_at_the_drawn_snr(tiny):
    s = tiny["train"]
    noise = s.noisy - s.clean
    snr = 10 * np.log10(np.sum(s.clean.astype(np.float64) ** 2, 1) / np.sum(noise.astype(np.float64) ** 2, 1))
    np.testing.assert_allclose(snr, s.snr_db, atol=0.05)
    assert set(s.snr_db) <= set(D.DataConfig().snrs_db)


def test_clean_clips_contain_speech(tiny):
    assert np.all(np.sqrt(np.mean(tiny["test"].clean ** 2, 1)) > 1e-3)


def test_stft_is_nfft512_hop128_and_inverts(tiny):
    x = tiny["val"].noisy
    spec = D.stft(x)
    assert spec.shape == (4, 8000 // 128 + 1, 257)
    np.testing.assert_allclose(D.istft(spec, x.shape[1]).numpy(), x, atol=1e-5)


def test_unit_mask_of_zero_reproduces_the_noisy_clip(tiny):
    x = tiny["val"].noisy
    spec = D.stft(x)
    out = D.istft(D.apply_mask(spec, torch.zeros(spec.shape)), x.shape[1]).numpy()
    np.testing.assert_allclose(out, x, atol=1e-5)


def test_si_snr_is_scale_invariant_and_drops_with_noise(rng):
    ref = rng.standard_normal(4000)
    assert D.si_snr(3.0 * ref, ref) > 60
    assert abs(D.si_snr(ref + 0.1 * rng.standard_normal(4000), ref) - 20) < 1.0


def test_stoi_scores_clean_above_noisy(tiny):
    s = tiny["test"]
    assert np.all(D.stoi(s.clean, s.clean) > 0.99)
    assert np.nanmean(D.stoi(s.noisy, s.clean)) < 0.99


def test_bad_config_is_a_readable_error():
    with pytest.raises(EdgesmithError, match="n_train"):
        D.DataConfig(n_train=0)
    with pytest.raises(EdgesmithError, match="noise"):
        D.make_noise("rain", 100, np.random.default_rng(0))


def test_configs_round_trip_through_json_and_reject_unknown_options():
    import json

    from edgesmith.models.lrnn.s5 import S5Config
    from edgesmith.models.lrnn.train import TrainConfig

    for cfg in (D.DataConfig.tiny(), S5Config(width=0.5), TrainConfig(epochs=3)):
        assert type(cfg).from_dict(json.loads(cfg.to_json())) == cfg
    with pytest.raises(EdgesmithError, match="no option"):
        D.DataConfig.from_dict({"n_trian": 3})
