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


def test_the_held_out_world_shares_no_accent_voice_variant_or_word_with_training():
    # the test split is the held-out set: a model must be scored on voices and sentences it never heard
    assert not set(D.TRAIN.accents) & set(D.HELDOUT.accents)
    assert not set(D.TRAIN.variants) & set(D.HELDOUT.variants)
    assert not set(D.TRAIN.words) & set(D.HELDOUT.words)


def test_every_noise_kind_is_unit_rms_and_babble_is_made_of_talkers():
    rng = np.random.default_rng(0)
    talkers = [np.sin(np.arange(4000) * f).astype(np.float32) for f in (0.05, 0.11, 0.2, 0.3)]
    for kind in D.NOISES:
        x = D.make_noise(kind, 8000, rng, talkers)
        assert x.shape == (8000,) and np.isfinite(x).all()
        assert np.sqrt(np.mean(x.astype(np.float64) ** 2)) == pytest.approx(1.0, rel=1e-3)
    with pytest.raises(EdgesmithError, match="talkers"):
        D.make_noise("babble", 8000, rng)


def test_test_split_cycles_through_every_noise_type_when_large_enough():
    split = D._make_split(len(D.NOISES), D.DataConfig.tiny(), 5, [np.ones(3000, np.float32) * 0.1] * 8)
    assert sorted(split.noise) == sorted(D.NOISES)


def test_a_room_keeps_the_length_and_adds_a_decaying_tail():
    x = np.zeros(16000, np.float32)
    x[100] = 1.0
    y = D.room(x, np.random.default_rng(1))
    assert y.shape == x.shape and y[100] == pytest.approx(1.0) and np.abs(y[2000:4000]).max() > 0
    assert np.abs(y[:100]).max() < 1e-6  # causal: nothing before the direct sound (FFT rounding aside)


def test_naming_a_split_makes_no_data_and_a_damaged_cache_file_is_one_error_then_made_anew(tmp_path, monkeypatch):
    # a deploy whose compressed models all come from the cache needs the splits' keys, not their clips
    from edgesmith.common import EdgesmithError
    from edgesmith.models.lrnn import data

    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    made = []
    real = data._synthesize
    monkeypatch.setattr(data, "_synthesize", lambda cfg, path: made.append(path) or real(cfg, path))
    cfg = data.DataConfig.tiny(seed=3)
    splits = data.load_splits(cfg)
    assert splits["train"].key.endswith("/train") and not made
    assert len(splits["test"].noisy) == cfg.n_test and len(made) == 1
    np.savez(made[0], train_noisy=np.zeros(2))  # damaged: arrays missing
    with pytest.raises(EdgesmithError, match="lacks"):
        _ = data.load_splits(cfg)["val"].clean
    assert len(data.load_splits(cfg)["val"].clean) == cfg.n_val and len(made) == 2
