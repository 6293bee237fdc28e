"""The user's own audio for lrnn-denoiser: folders of WAV files in, scored by SI-SNR against clean/."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.io import wavfile
from scipy.signal import resample_poly

from edgesmith.bench.sources.base import UserRequest
from edgesmith.bench.sources.producer_data import with_user_data
from edgesmith.common import EdgesmithError
from edgesmith.models import get_producer
from edgesmith.models.lrnn.audio import load_wav_folder
from edgesmith.models.lrnn.train import torch_mask_fn


@pytest.fixture(scope="module")
def denoiser():
    return get_producer("lrnn-denoiser", tiny=True).build()


@pytest.fixture(scope="module")
def wav_dir(denoiser, tmp_path_factory):
    d = tmp_path_factory.mktemp("wav")
    (d / "noisy").mkdir(), (d / "clean").mkdir()
    test = denoiser.splits()["test"]
    for i in range(3):  # float32 at 16 kHz: bit for bit the producer's own clips
        wavfile.write(d / "noisy" / f"c{i}.wav", 16000, test.noisy[i])
        wavfile.write(d / "clean" / f"c{i}.wav", 16000, test.clean[i])
    return d


def test_a_folder_of_16khz_float_wavs_scores_like_the_same_clips_in_memory(denoiser, wav_dir):
    split, has_clean, _ = load_wav_folder(wav_dir)
    test = denoiser.splits()["test"]
    np.testing.assert_array_equal(split.noisy, test.noisy[:3])
    assert has_clean
    p = with_user_data(get_producer("lrnn-denoiser", tiny=True), UserRequest(eval_data=str(wav_dir)))
    mine = p.evaluate(torch_mask_fn(p.module), with_stoi=False)
    ref = get_producer("lrnn-denoiser", tiny=True).build()
    ref.splits_ = {**ref.splits(), "test": test.subset(slice(0, 3))}
    assert mine.n_samples == 3 and mine.value == pytest.approx(ref.evaluate(torch_mask_fn(ref.module),
                                                                              with_stoi=False).value, abs=1e-6)
    assert any("3 WAV clip(s)" in n for n in p.report_notes())


def test_other_rates_integer_pcm_and_stereo_are_converted(tmp_path, denoiser):
    clip = denoiser.splits()["test"].clean[0]
    x8 = resample_poly(clip, 1, 2)
    wavfile.write(tmp_path / "a.wav", 8000, (np.stack([x8, x8], 1) * 32767).astype(np.int16))
    split, has_clean, notes = load_wav_folder(tmp_path, "calibration data")
    assert not has_clean and split.noisy.shape == (1, 2 * len(x8))
    assert any("resampled 8000 Hz" in n for n in notes) and any("channels averaged" in n for n in notes)
    assert np.corrcoef(split.noisy[0][: len(clip)], clip)[0, 1] > 0.9


def test_bad_folders_are_user_errors_naming_the_file(tmp_path):
    with pytest.raises(EdgesmithError, match="no .wav files"):
        load_wav_folder(tmp_path)
    (tmp_path / "noisy").mkdir(), (tmp_path / "clean").mkdir()
    wavfile.write(tmp_path / "noisy" / "x.wav", 16000, np.zeros(800, np.float32))
    with pytest.raises(EdgesmithError, match="x.wav has no clean reference"):
        load_wav_folder(tmp_path)
    (tmp_path / "clean" / "x.wav").write_bytes(b"RIFF garbage")
    with pytest.raises(EdgesmithError, match="x.wav: not a readable WAV"):
        load_wav_folder(tmp_path)


def test_deploy_scores_the_users_wavs(capsys, wav_dir, tmp_path):
    from edgesmith.bench.cli import main

    code = main(["deploy", "lrnn-denoiser", "--model-option", "tiny=true", "--target", "host-cpu", "--variant",
                 "dense", "--eval-data", str(wav_dir), "--out", str(tmp_path / "r"), "--reps", "5", "--warmup", "1",
                 "--quiet"])
    assert code == 0, capsys.readouterr().err
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["reference"]["evaluation"]["metric"] == "si_snri" and r["reference"]["evaluation"]["n_samples"] == 3
    code = main(["deploy", "lrnn-denoiser", "--model-option", "tiny=true", "--target", "host-cpu",
                 "--eval-data", str(wav_dir / "noisy"), "--out", str(tmp_path / "r2")])
    assert code == 2 and "clean/" in capsys.readouterr().err  # noisy clips alone cannot be scored
    # an empty folder: the denoiser reads WAV folders, so that is what the error asks for (not .npy files)
    (tmp_path / "empty").mkdir()
    code = main(["deploy", "lrnn-denoiser", "--model-option", "tiny=true", "--target", "host-cpu",
                 "--eval-data", str(tmp_path / "empty"), "--out", str(tmp_path / "r3")])
    assert code == 2 and "holds no .wav files" in capsys.readouterr().err and not (tmp_path / "r3").exists()


def test_clips_of_other_lengths_run_through_the_fixed_point_variant_too(capsys, denoiser, tmp_path):
    from edgesmith.bench.cli import main

    # 0.4-0.7 s clips (the tiny model's own are 0.5 s): padded to the longest; calibration cut to match
    test = denoiser.splits()["test"]
    (tmp_path / "noisy").mkdir(), (tmp_path / "clean").mkdir()
    for i, n in enumerate((6400, 11000)):
        x = np.concatenate([test.noisy[i], test.noisy[i + 1]])[:n]
        c = np.concatenate([test.clean[i], test.clean[i + 1]])[:n]
        wavfile.write(tmp_path / "noisy" / f"k{i}.wav", 16000, x), wavfile.write(tmp_path / "clean" / f"k{i}.wav", 16000, c)
    code = main(["deploy", "lrnn-denoiser", "--model-option", "tiny=true", "--target", "host-cpu", "--variant",
                 "sparse-fixed", "--eval-data", str(tmp_path), "--out", str(tmp_path / "r"), "--reps", "5",
                 "--warmup", "1", "--quiet"])
    assert code == 0, capsys.readouterr().err
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    (row,) = r["results"]
    assert row["evaluation"]["n_samples"] == 2 and np.isfinite(row["evaluation"]["value"])


def test_a_folder_reads_wav_files_whatever_the_case_of_their_extension(tmp_path):
    from edgesmith.models.lrnn.audio import is_wav_folder, load_wav_folder

    x = (np.random.default_rng(0).normal(size=1600) * 3000).astype(np.int16)
    for sub, name in (("noisy", "A.WAV"), ("clean", "a.wav"), ("noisy", "b.wav"), ("clean", "b.wav")):
        (tmp_path / sub).mkdir(exist_ok=True)
        wavfile.write(tmp_path / sub / name, 16000, x)
    split, has_clean, _ = load_wav_folder(tmp_path)
    assert has_clean and list(split.noise) == ["A.WAV", "b.wav"]
    assert is_wav_folder(tmp_path / "noisy")
