"""`edgesmith denoise`: WAV in, WAV out, any rate, channel count, length and sample format (tiny model)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.io import wavfile

from cli_helpers import assert_user_error, run_cli
from edgesmith.bench.apps.denoise import denoise
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
    from edgesmith.bench.apps.denoise import speech_level

    e = p.enhance_waveform(torch_mask_fn(p.module), x)  # the model's own, put at the input's speech level
    np.testing.assert_allclose(y, e * speech_level(e.astype(np.float64), x.astype(np.float64)), atol=1e-6)


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


def test_the_streaming_step_in_onnxruntime_gives_the_torch_result(noisy, tmp_path):
    # onnxruntime runs the exported step frame by frame with the state carried; torch runs the whole clip as an
    # FFT convolution: the same causal model, so the same audio up to float rounding
    src = noisy / "b_22k_float_stereo.wav"
    a = denoise(src, tmp_path / "torch.wav", model_options=TINY, progress=False)[0]
    b = denoise(src, tmp_path / "ort.wav", runtime="onnxruntime", model_options=TINY, progress=False)[0]
    assert (a["runtime"], b["runtime"]) == ("torch", "onnxruntime")
    np.testing.assert_allclose(wavfile.read(tmp_path / "ort.wav")[1], wavfile.read(tmp_path / "torch.wav")[1], atol=1e-4)
    assert b["rtf"] > 0 and 0 < b["rtf_model"] <= b["rtf"]


def test_a_variant_runtime_pair_that_does_not_exist_is_refused_with_the_fix(capsys, noisy, tmp_path):
    code, _, err = run_cli(capsys, "denoise", noisy / "a_16k_int16.wav", "--out", tmp_path / "o.wav",
                           "--runtime", "lava", "--model-option", "tiny=true")
    assert_user_error(code, err, "does not run in 'lava'", "--variant fixed")
    assert not (tmp_path / "o.wav").exists()


def test_24bit_audio_comes_back_24bit_and_downmix_writes_mono(tmp_path):
    import wave

    x = get_producer("lrnn-denoiser", tiny=True).splits()["test"].noisy[0]
    pcm = (np.stack([x, 0.5 * x], 1) * 2 ** 22).astype("<i4")
    with wave.open(str(tmp_path / "in24.wav"), "wb") as w:
        w.setnchannels(2), w.setsampwidth(3), w.setframerate(44100)
        w.writeframes(pcm.view(np.uint8).reshape(-1, 4)[:, :3].tobytes())
    denoise(tmp_path / "in24.wav", tmp_path / "out24.wav", model_options=TINY, progress=False)
    with wave.open(str(tmp_path / "out24.wav")) as w:
        assert (w.getsampwidth(), w.getnchannels(), w.getframerate(), w.getnframes()) == (3, 2, 44100, len(x))
    rec = denoise(tmp_path / "in24.wav", tmp_path / "mono.wav", downmix=True, model_options=TINY, progress=False)[0]
    with wave.open(str(tmp_path / "mono.wav")) as w:
        assert (w.getsampwidth(), w.getnchannels(), w.getnframes()) == (3, 1, len(x))
    assert rec["channels"] == 1


@pytest.mark.lava
def test_the_fixed_network_in_lava_writes_the_lrnn_ref_audio(noisy, tmp_path):
    x = get_producer("lrnn-denoiser", tiny=True).splits()["test"].noisy[1][:3200]  # 0.2 s: 26 frames in Lava
    wavfile.write(tmp_path / "x.wav", 16000, x.astype(np.float32))
    ref = denoise(tmp_path / "x.wav", tmp_path / "ref.wav", variant="fixed", model_options=TINY, progress=False)[0]
    lava = denoise(tmp_path / "x.wav", tmp_path / "lava.wav", variant="fixed", runtime="lava", model_options=TINY,
                   progress=False)[0]
    assert (ref["runtime"], lava["runtime"]) == ("lrnn-ref", "lava")
    np.testing.assert_array_equal(wavfile.read(tmp_path / "lava.wav")[1], wavfile.read(tmp_path / "ref.wav")[1])


def test_a_mask_that_raises_the_level_gives_back_the_inputs_level_and_normalize_asks_for_full_scale(tmp_path):
    # the denoiser's loss is scale-invariant, so nothing stops its mask from doubling a loud file's level
    from edgesmith.bench.apps.denoise import denoise_file

    p = get_producer("lrnn-denoiser", tiny=True).build()
    x = p.splits()["test"].noisy[0]
    x = 0.9 * x / np.abs(x).max()
    wavfile.write(tmp_path / "loud.wav", 16000, (np.stack([x, 0.5 * x], 1) * 32767).astype(np.int16))
    rec = denoise_file(p, lambda f: np.ones_like(f), tmp_path / "loud.wav", tmp_path / "out.wav")  # gain 2 everywhere
    _, y = wavfile.read(tmp_path / "out.wav")
    assert abs(rec["level_db"]) < 0.1 and rec["gain_db"] == 0.0  # the speech's level, not twice it
    assert np.abs(y.astype(np.int64)).max() < 32767  # no sample pinned at full scale
    assert np.corrcoef(y[:, 0], y[:, 1])[0, 1] > 0.999 and abs(np.abs(y[:, 1]).max() / np.abs(y[:, 0]).max() - 0.5) < 0.01
    quiet = tmp_path / "quiet.wav"
    wavfile.write(quiet, 16000, (x * 0.1 * 32767).astype(np.int16))
    rec = denoise_file(p, lambda f: np.zeros_like(f), quiet, tmp_path / "norm.wav", normalize=True)
    assert rec["gain_db"] > 15 and 32000 < np.abs(wavfile.read(tmp_path / "norm.wav")[1].astype(np.int64)).max() < 32767


def test_speech_level_fits_the_speech_in_the_input_not_the_noise():
    from edgesmith.bench.apps.denoise import speech_level

    rng = np.random.default_rng(0)
    s, n = rng.normal(size=16000), rng.normal(size=16000)
    assert abs(speech_level(3 * s, s + n) - 1 / 3) < 0.02  # the enhanced speech, 3x too loud, comes back to s
    assert speech_level(np.zeros(10), np.ones(10)) == 1.0
    assert speech_level(100 * n, s) <= np.sqrt(np.dot(s, s) / np.dot(100 * n, 100 * n)) + 1e-12  # never louder than the input
