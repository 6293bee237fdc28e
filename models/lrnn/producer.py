"""The ``lrnn-denoiser`` producer: an S5 denoiser trained here on espeak-ng speech and real recorded talkers.

Inputs are feature frames (clips, frames, 257); the prediction is the mask of the same shape; the
metric is the SI-SNR improvement (dB) of the enhanced test clips over the noisy ones, higher is better
(the SI-SNR itself and STOI are in ``Evaluation.extra``). ``tiny=True`` is the seconds-long test version
(synthesized speech only).

Default settings (about 1 minute of data making and 20 minutes of training on 2 cores; the weights ship in
``models/weights/``, so nobody waits for them): 2048 training clips of 2 s, half of them speaking real
recorded talkers (``models/lrnn/speech.py``: KLettres and Asterisk voices from Debian packages) and the other
half espeak-ng sentences of the ``TRAIN`` world, 30% of them through an 8 kHz telephone band; 64 validation
clips (real talkers of their own); 135 held-out test clips (synthesized ``HELDOUT`` world, nine noise types x
five SNRs, three clips each; the real-talker evaluation is ``bench/studies/denoise_real.py``); width 3.0
(d_model 192 as in the paper, 96 complex modes, 3 layers, 545k parameters), 30 epochs of Adam (lr 3e-3,
batch 16, cosine decay). ``real_p=0, narrowband_p=0`` is the earlier, synthesized-only recipe.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import EdgesmithError, cache_dir, load_or_train
from edgesmith.models.lrnn.data import HOP, N_BINS, SR, DataConfig, features, load_splits, stft
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser
from edgesmith.models.lrnn.train import TrainConfig, score, train


# the default model's speech: half real talkers, 30% telephone band (on real talkers it held out, +6.2 dB SI-SNRi
# against +3.3 dB for the synthesized-only recipe, which scores 1 dB better on synthesized speech)
REAL_SPEECH = {"real_p": 0.5, "narrowband_p": 0.3}


@register_producer
class LrnnDenoiser(Producer):
    name = "lrnn-denoiser"
    tiny_options = {"tiny": True}
    description = "S5-style linear RNN speech denoiser (STFT 512/128 mask), real + espeak-ng speech, generated noise"
    # the improvement over the noisy input: a clip's absolute SI-SNR says as much about its SNR as about the model
    metric = Metric("si_snri", higher_is_better=True, unit="dB")
    kind = "stream"
    frame_seconds = HOP / SR  # one STFT hop: 8 ms of audio per input frame
    audio_rate = SR  # `edgesmith denoise` resamples audio to this rate for the model, and back

    def __init__(self, seed: int = 0, tiny: bool = False, width: float | None = None, epochs: int | None = None,
                 n_train: int | None = None, real_p: float | None = None, narrowband_p: float | None = None,
                 eval_clips: int | None = None, eval_clip_s: float | None = None):
        super().__init__(seed=seed)
        self.tiny = tiny
        # a short evaluation (a Lava simulation runs at some 30x real time): ``eval_clips`` test clips spread over
        # every noise type and SNR, cut to ``eval_clip_s`` seconds; the training data and the weights stay as they are
        if eval_clips is not None and (not isinstance(eval_clips, int) or eval_clips < 1):
            raise EdgesmithError(f"eval_clips={eval_clips!r} is not a positive whole number.", "pass eval_clips=1 or more.")
        if eval_clip_s is not None and not 0.05 <= float(eval_clip_s) <= 30:
            raise EdgesmithError(f"eval_clip_s={eval_clip_s!r} is outside 0.05-30 s.", "pass a clip length in seconds.")
        self.eval_clips, self.eval_clip_s = eval_clips, eval_clip_s
        self.data_cfg = DataConfig.tiny(seed) if tiny else DataConfig(seed=seed, **REAL_SPEECH)
        # fewer training clips (a sweep's budget; the held-out test split stays as it is), real recorded talkers,
        # telephone-band speech: each changes the training data, and so the weights' cache key
        changes = {k: v for k, v in (("n_train", n_train), ("real_p", real_p), ("narrowband_p", narrowband_p))
                   if v is not None}
        if changes:
            self.data_cfg = DataConfig(**{**asdict(self.data_cfg), **changes})
        self.model_cfg = S5Config(width=width if width is not None else (0.25 if tiny else 3.0),
                                  n_layers=2 if tiny else 3)
        self.train_cfg = TrainConfig(epochs=epochs if epochs is not None else (2 if tiny else 30), seed=seed)

    def splits(self):
        if not hasattr(self, "splits_"):
            self.splits_ = load_splits(self.data_cfg)
            if self.eval_clips or self.eval_clip_s:
                self.splits_ = {**self.splits_, "test": self._short_test(self.splits_["test"])}
        return self.splits_

    def _short_test(self, test):
        """The test split's first ``eval_clips`` clips of a stride that walks the noise types and SNRs together (the
        split cycles the types clip by clip and the SNRs every len(NOISES) clips), cut to ``eval_clip_s``."""
        from edgesmith.models.lrnn.data import NOISES, Split

        n = len(test)
        idx = np.arange(n)
        if self.eval_clips:
            k = min(self.eval_clips, n)
            idx = np.arange(k) * (len(NOISES) + 1)
            if idx[-1] >= n:  # a split too short for the stride: clips evenly spaced over it
                idx = np.unique(np.linspace(0, n - 1, k).round().astype(int))
        cut = test.noisy.shape[1] if not self.eval_clip_s else int(round(float(self.eval_clip_s) * SR))
        return Split(test.noisy[idx, :cut], test.clean[idx, :cut], test.snr_db[idx], test.noise[idx])

    def _cache_path(self):
        key = repr((self.name, self.data_cfg.key(), self.model_cfg.to_dict(), asdict(self.train_cfg),
                    torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "LrnnDenoiser":
        path = self._cache_path()
        model = S5Denoiser(self.model_cfg, seed=self.seed)
        history = load_or_train(model, path, lambda: train(model, self.splits()["train"], self.train_cfg))
        if history is not None:
            self.history_ = history
        self.module_ = model.eval()
        return self

    @property
    def input_shape(self) -> tuple[int, ...]:
        """(frames, 257) of one clip, from the config alone (listing models must not synthesize data), or of
        the user's clips once ``use_user_data`` has read them."""
        if getattr(self, "user_frames_", None):
            return (self.user_frames_, N_BINS)
        return (int(round((self.eval_clip_s or self.data_cfg.clip_s) * SR)) // HOP + 1, N_BINS)

    def features(self, split: str) -> np.ndarray:
        return features(stft(self.splits()[split].noisy).abs()).numpy()

    def calibration_data(self, n: int = 128) -> np.ndarray:
        if getattr(self, "user_calibration_", None) is not None:
            return np.ascontiguousarray(self.user_calibration_[:n])
        clips = self.splits()["train"].noisy[:n]  # n clips, not the whole split
        if self.eval_clip_s:  # one clip length per run, as the evaluation's
            clips = clips[:, : int(round(float(self.eval_clip_s) * SR))]
        return features(stft(clips).abs()).numpy()

    def use_user_data(self, calibration_data=None, eval_data=None) -> list[str] | None:
        """The user's audio: folders of WAV files (``models/lrnn/audio.py``) replace the test split (scored by
        SI-SNR against their clean/ files) and the calibration clips. None when neither path is such a folder."""
        from pathlib import Path

        from edgesmith.common import EdgesmithError
        from edgesmith.models.lrnn.audio import is_wav_folder, load_wav_folder

        def audio(p):  # a WAV folder, or a folder with no arrays either: its error should speak of WAV files
            return p and (is_wav_folder(p) or (Path(p).is_dir() and not any(Path(p).glob("*.np[yz]"))))

        if not any(audio(p) for p in (calibration_data, eval_data)):
            return None
        notes, splits = [], dict(self.splits())
        if eval_data:
            test, has_clean, n = load_wav_folder(eval_data)
            if not has_clean:
                raise EdgesmithError(f"evaluation data: {eval_data} has no clean/ folder, so SI-SNR cannot be scored.",
                                     "put the noisy clips in noisy/ and their clean speech in clean/ (same names).")
            splits["test"], notes = test, notes + n
            self.user_frames_ = int(stft(test.noisy[:1]).shape[1])
        cal_audio = splits["train"].noisy
        if calibration_data:
            cal, _, n = load_wav_folder(calibration_data, "calibration data")
            cal_audio, notes = cal.noisy, notes + n
        if eval_data:  # every clip of a run has one length: calibration clips are cut or zero-padded to the test's
            length = splits["test"].noisy.shape[1]
            cal_audio = np.pad(cal_audio, ((0, 0), (0, max(0, length - cal_audio.shape[1]))))[:, :length]
        self.user_calibration_ = features(stft(cal_audio).abs()).numpy()
        self.splits_ = splits
        return notes

    def training_data(self):
        """The train split (noisy and clean clips) that prune-lrnn and qat-lrnn fine-tune on."""
        return self.splits()["train"]

    def evaluate(self, predict, split: str = "test", with_stoi: bool = True) -> Evaluation:
        res = score(lambda f: np.asarray(predict(f)), self.splits()[split], with_stoi=with_stoi)
        return Evaluation(self.metric, res["si_snr_improvement_db"], res["n_clips"], extra=res)

    def report_notes(self) -> list[str]:
        return list(getattr(self, "user_notes_", None) or [])

    def enhance_waveform(self, mask_fn, wave: np.ndarray) -> np.ndarray:
        """One mono clip of any length at ``audio_rate`` -> the enhanced clip of the same length (a clip shorter
        than one STFT frame is padded with silence for the transform and cut back)."""
        from edgesmith.models.lrnn.data import NFFT, apply_mask, istft

        wave = np.asarray(wave, np.float32)
        padded = np.pad(wave, (0, max(0, NFFT - len(wave))))
        spec = stft(padded[None])
        mask = torch.as_tensor(np.asarray(mask_fn(features(spec.abs()).numpy())))
        return istft(apply_mask(spec, mask), len(padded)).numpy()[0][: len(wave)]

