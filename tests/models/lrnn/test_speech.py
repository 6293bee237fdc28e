"""Real recorded talkers: roles kept apart, independent-check voices never read, clips built from them."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgesmith.common import EdgesmithError
from edgesmith.models.lrnn import speech
from edgesmith.models.lrnn.data import NOISES, SR, DataConfig, _make_split


def test_no_talker_has_two_roles_and_no_role_reads_a_reserved_voice():
    by_folder = {}
    for t in speech.TALKERS:
        assert by_folder.setdefault(t.folder, t.role) == t.role
        assert not any(r in str(t.folder) for r in speech.RESERVED)
    assert {t.role for t in speech.TALKERS} == {"train", "val", "test"}


def test_a_reserved_folder_is_refused_even_when_asked_for_by_name(tmp_path):
    allison = speech.Talker("x", "asterisk-core-sounds-en-wav", tmp_path / "en_US_f_Allison", "test")
    with pytest.raises(EdgesmithError, match="reserved"):
        speech.read_talker(allison)


def test_a_missing_package_is_named_with_the_command_that_installs_it(monkeypatch, tmp_path):
    gone = tuple(replace(t, folder=tmp_path / t.name) for t in speech.TALKERS)
    monkeypatch.setattr(speech, "TALKERS", gone)
    with pytest.raises(EdgesmithError, match="klettres-data") as info:
        speech.require("val")
    assert "make setup" in info.value.fix or "install" in info.value.fix


def _talker(tmp_path: Path, n: int = 3) -> speech.Talker:
    from scipy.io import wavfile

    folder = tmp_path / "voice"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):  # a tone burst between silences, at 8 kHz like a telephone prompt
        t = np.arange(4000) / 8000
        x = np.concatenate([np.zeros(800), 0.3 * np.sin(2 * np.pi * (200 + 50 * i) * t) * rng.uniform(0.5, 1), np.zeros(800)])
        wavfile.write(folder / f"p{i}.WAV", 8000, (x * 32767).astype(np.int16))
    return speech.Talker("voice", "none", folder, "train", narrowband=True)


def test_passages_are_trimmed_recordings_joined_with_pauses_and_repeat_from_their_seed(tmp_path):
    t = _talker(tmp_path)
    recs = speech.read_talker(t)
    assert len(recs) == 3 and all(abs(len(r) - SR // 2) <= SR // 100 for r in recs)  # 0.1 s of silence each side gone
    a, b = speech.passages(t, 2, 2.0, seed=5), speech.passages(t, 2, 2.0, seed=5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and all(len(x) >= 2 * SR for x in a)


def test_narrowband_leaves_nothing_above_4khz():
    x = np.random.default_rng(0).normal(size=SR).astype(np.float32)
    spec = np.abs(np.fft.rfft(speech.narrowband(x))) ** 2
    f = np.fft.rfftfreq(SR, 1 / SR)
    assert spec[f > 4200].sum() < 1e-3 * spec[f < 3800].sum()


def test_the_new_data_settings_leave_older_cache_keys_and_clips_alone():
    base = DataConfig.tiny()
    assert replace(base, real_p=0.0, narrowband_p=0.0).key() == base.key()
    assert replace(base, real_p=0.5).key() != base.key() != replace(base, narrowband_p=0.3).key()
    with pytest.raises(EdgesmithError, match="real_p"):
        replace(base, real_p=1.5)


def test_a_split_with_real_passages_speaks_them_and_band_limits_its_share():
    cfg = replace(DataConfig.tiny(), real_p=1.0, narrowband_p=1.0, reverb_p=0.0)
    rng = np.random.default_rng(0)
    synth = [rng.normal(size=SR).astype(np.float32) * 0.1 for _ in range(8)]
    real = [np.sin(2 * np.pi * 300 * np.arange(3 * SR) / SR).astype(np.float32) for _ in range(3)]
    split = _make_split(len(NOISES), cfg, 0, synth, real=real)
    f = np.fft.rfftfreq(split.clean.shape[1], 1 / SR)
    for c in split.clean:  # every target is the 300 Hz "talker", and nothing above the telephone band is left
        spec = np.abs(np.fft.rfft(c)) ** 2
        assert spec[(f > 250) & (f < 350)].sum() > 0.9 * spec.sum()
    plain = _make_split(len(NOISES), DataConfig.tiny(), 0, synth)
    again = _make_split(len(NOISES), DataConfig.tiny(), 0, synth, real=None)
    assert np.array_equal(plain.noisy, again.noisy)
