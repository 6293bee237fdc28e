"""`edgesmith denoise`: WAV in, WAV out, any rate, channel count, length and sample format (tiny model)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.io import wavfile

from cli_helpers import assert_user_error, run_cli
from edgesmith.bench.denoise import denoise
from edgesmith.models import get_producer
from edgesmith.models.lrnn.train import torch_mask_fn

TINY = {"tiny": True}


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    d = tmp_path_factory.mktemp("noisy")
    test = get_producer("lrnn-denoiser", tiny=True).splits()["test"]
    x = np.concatenate([test.noisy[0], test.noisy[1][:3001]])  # 0.69 s: not the model's 0.5 s clip length
    wavfile.write(d / "a_16k_int16.wav", 16000, (x * 32000).astype(np.int16))
    wavfile.write(d / "b_22k_float_stereo.wav", 22050, np.stack([x[:9000], -0.5 * x[:9000]], 1).astype(np.float32))
    wavfile.write(d / "c_8k_int32.wav", 8000, (x[:5000] * 2 ** 30).astype(np.int32))
    return d


@pytest.mark.parametrize("variant", ["dense", "fixed"])
def test_outputs_keep_the_inputs_rate_channels_length_and_format(noisy, tmp_path, variant):
    done = denoise(noisy, tmp_path / "out", variant=variant, model_options=TINY, progress=False)
    assert len(done) == 3
    for f in sorted(noisy.glob("*.wav")):
        r_in, x = wavfile.read(f)
        r_out, y = wavfile.read(tmp_path / "out" / f.name)
        assert (r_out, y.shape, y.dtype) == (r_in, x.shape, x.dtype)
        assert np.all(np.isfinite(y.astype(np.float64))) and np.abs(y).max() > 0


def test_a_16khz_float_file_is_the_models_own_enhancement(tmp_path):
    p = get_producer("lrnn-denoiser", tiny=True).build()
    x = p.splits()["test"].noisy[2][:7001]
    wavfile.write(tmp_path / "x.wav", 16000, x.astype(np.float32))
    denoise(tmp_path / "x.wav", tmp_path / "y.wav", model_options=TINY, progress=False)
    _, y = wavfile.read(tmp_path / "y.wav")
    np.testing.assert_allclose(y, p.enhance_waveform(torch_mask_fn(p.module), x), atol=1e-6)


def test_cli_refuses_non_audio_and_existing_outputs(capsys, tmp_path, noisy):
    (tmp_path / "notes.wav").write_text("not audio")
    code, _, err = run_cli(capsys, "denoise", tmp_path / "notes.wav", "--out", tmp_path / "o.wav",
                           "--model-option", "tiny=true")
    assert_user_error(code, err, "notes.wav", "WAV")
    assert not (tmp_path / "o.wav").exists()
    (tmp_path / "taken.wav").write_bytes(b"mine")
    code, _, err = run_cli(capsys, "denoise", noisy / "a_16k_int16.wav", "--out", tmp_path / "taken.wav",
                           "--model-option", "tiny=true")
    assert_user_error(code, err, "taken.wav", "--force")
    assert (tmp_path / "taken.wav").read_bytes() == b"mine"  # the user's file is untouched
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capsys, "denoise", tmp_path / "empty", "--out", tmp_path / "o")
    assert_user_error(code, err, "no .wav files")
