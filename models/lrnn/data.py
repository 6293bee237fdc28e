"""Noisy-speech data made on this machine: espeak-ng speech + generated noise, 16 kHz, fixed splits.

No download: each clip is a random sentence spoken by ``espeak-ng`` (voice, speed and pitch drawn
per clip), resampled 22.05 -> 16 kHz and mixed with one of several generated noises (white, pink,
brown, amplitude-modulated, hum with harmonics, narrow-band babble-like) at an SNR from
``DataConfig.snrs_db``. Train, validation and test use disjoint seeds (so disjoint sentences and
noise draws); the arrays are cached under ``edgesmith.common.cache_dir()`` keyed by the config.

Signal processing of the paper (Intel N-DNS setting): STFT with nfft 512, hop 128 (8 ms at 16 kHz)
and a periodic Hann window; the model sees the magnitude (log-compressed, ``features``) and returns
a mask ``m``; the clean estimate is ``|X| (1 + m)`` with the noisy phase (``apply_mask``).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from edgesmith.common import EdgesmithError, atomic_path, cache_dir
from edgesmith.models.lrnn.config import Config

SR = 16_000
NFFT = 512
HOP = 128
N_BINS = NFFT // 2 + 1
NOISES = ("white", "pink", "brown", "modulated", "hum", "babble")
VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-029", "en-gb-x-rp", "en-us+f3", "en-gb+f2", "en-us+m3",
          "en+f4", "en-gb-x-gbclan")
WORDS = (
    "the a one two three four five six seven eight nine ten red green blue yellow black white small large "
    "quick slow happy quiet loud bright dark warm cold early late river mountain city garden window table "
    "water music paper engine signal sensor robot model network morning evening winter summer spring autumn "
    "travel listen speak open close start stop build carry follow bring watch learn teach write read move "
    "under over after before near far inside outside always never often today tomorrow yesterday because "
    "station market doctor teacher student friend family animal forest ocean island bridge tower street "
    "number letter question answer picture story voice sound light power energy battery circuit memory"
).split()


@dataclass(frozen=True)
class DataConfig(Config):
    """Sizes of the splits (clips), clip length (s), mixing SNRs (dB) and the seed; ``tiny()`` for tests."""

    n_train: int = 384
    n_val: int = 48
    n_test: int = 48
    clip_s: float = 2.0
    snrs_db: tuple[float, ...] = (-5.0, 0.0, 5.0, 10.0, 15.0)
    seed: int = 0

    def validate(self) -> None:
        for name in ("n_train", "n_val", "n_test"):
            if int(getattr(self, name)) < 1:
                self._fail(name, f"is {getattr(self, name)}", "use at least one clip per split.")
        if not 0.1 <= self.clip_s <= 30:
            self._fail("clip_s", f"is {self.clip_s}", "use a clip length from 0.1 to 30 s.")
        if not self.snrs_db:
            self._fail("snrs_db", "is empty", "give at least one mixing SNR in dB.")

    @classmethod
    def tiny(cls, seed: int = 0) -> "DataConfig":
        return cls(n_train=8, n_val=4, n_test=4, clip_s=0.5, seed=seed)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Split:
    """Time-domain clips of one split: ``noisy``/``clean`` (n, samples) float32, ``snr_db``, ``noise`` names."""

    noisy: np.ndarray
    clean: np.ndarray
    snr_db: np.ndarray
    noise: np.ndarray

    def __len__(self) -> int:
        return len(self.noisy)


def espeak_binary() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise EdgesmithError("espeak-ng (the local speech synthesizer the LRNN data needs) is not installed.",
                             "run `make setup` or `apt-get install -y espeak-ng`.")
    return exe


def synthesize(text: str, voice: str, speed: int, pitch: int, workdir: Path) -> np.ndarray:
    """Speak ``text`` with espeak-ng and return it at 16 kHz, float32 in [-1, 1]."""
    from scipy.io import wavfile
    from scipy.signal import resample_poly

    wav = workdir / "utt.wav"
    proc = subprocess.run([espeak_binary(), "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(wav), text],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or not wav.exists():
        raise EdgesmithError(f"espeak-ng failed for voice {voice!r}: {proc.stderr.strip()[:200]}",
                             "check the espeak-ng installation (`espeak-ng --voices=en`).")
    rate, x = wavfile.read(wav)
    x = x.astype(np.float32) / 32768.0
    if rate != SR:
        g = np.gcd(SR, rate)
        x = resample_poly(x, SR // g, rate // g).astype(np.float32)
    return x


def make_noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """One of ``NOISES``, ``n`` samples, unit RMS."""
    t = np.arange(n) / SR
    white = rng.standard_normal(n)
    if kind == "white":
        x = white
    elif kind in ("pink", "brown"):
        spec = np.fft.rfft(white)
        f = np.maximum(np.fft.rfftfreq(n, 1 / SR), 20.0)
        spec /= np.sqrt(f) if kind == "pink" else f
        x = np.fft.irfft(spec, n)
    elif kind == "modulated":
        rate = rng.uniform(2.0, 8.0)
        x = white * (1.0 + 0.9 * np.sin(2 * np.pi * rate * t + rng.uniform(0, 2 * np.pi)))
    elif kind == "hum":
        f0 = rng.choice([50.0, 60.0]) * rng.uniform(0.98, 1.02)
        x = sum(np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 12))
        x = x + 0.1 * white
    elif kind == "babble":  # several random formant-like bands with syllable-rate envelopes
        spec = np.fft.rfft(white)
        f = np.fft.rfftfreq(n, 1 / SR)
        band = sum(np.exp(-0.5 * ((f - rng.uniform(200, 3500)) / rng.uniform(80, 300)) ** 2) for _ in range(6))
        x = np.fft.irfft(spec * band, n) * (1.0 + 0.8 * np.sin(2 * np.pi * rng.uniform(3, 6) * t))
    else:
        raise EdgesmithError(f"unknown noise kind {kind!r}.", f"use one of {', '.join(NOISES)}.")
    x = np.asarray(x, np.float64)
    return (x / (np.sqrt(np.mean(x ** 2)) + 1e-12)).astype(np.float32)


def _make_split(n: int, cfg: DataConfig, seed: int, workdir: Path) -> Split:
    rng = np.random.default_rng(seed)
    length = int(round(cfg.clip_s * SR))
    noisy, clean = np.zeros((n, length), np.float32), np.zeros((n, length), np.float32)
    snrs, kinds = np.zeros(n, np.float32), []
    for i in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(3, 9)))
        speech = synthesize(" ".join(words), str(rng.choice(VOICES)), int(rng.integers(130, 200)),
                            int(rng.integers(30, 80)), workdir)
        speech = speech[: length]
        start = int(rng.integers(0, length - len(speech) + 1))
        s = np.zeros(length, np.float32)
        s[start : start + len(speech)] = speech
        s *= 10 ** (rng.uniform(-30, -20) / 20) / (np.sqrt(np.mean(s ** 2)) + 1e-12)  # speech at -30..-20 dBFS
        kind = NOISES[i % len(NOISES)] if n >= len(NOISES) else str(rng.choice(NOISES))
        snr = float(cfg.snrs_db[int(rng.integers(len(cfg.snrs_db)))])
        noise = make_noise(kind, length, rng) * np.sqrt(np.mean(s ** 2)) * 10 ** (-snr / 20)
        clean[i], noisy[i], snrs[i] = s, s + noise, snr
        kinds.append(kind)
    return Split(noisy, clean, snrs, np.array(kinds))


def load_splits(cfg: DataConfig) -> dict[str, Split]:
    """{"train", "val", "test"} for ``cfg``: made once (seconds to a minute), then read from the cache."""
    path = cache_dir() / "lrnn-data" / f"speech-{cfg.key()}.npz"
    if not path.exists():
        arrays = {}
        with tempfile.TemporaryDirectory(prefix="edgesmith-espeak-") as tmp:
            for j, (name, n) in enumerate((("train", cfg.n_train), ("val", cfg.n_val), ("test", cfg.n_test))):
                split = _make_split(int(n), cfg, cfg.seed * 1000 + 17 * (j + 1), Path(tmp))
                arrays.update({f"{name}_{k}": v for k, v in vars(split).items()})
        with atomic_path(path, force=True) as tmp_path:
            with open(tmp_path, "wb") as f:
                np.savez(f, **arrays)
    with np.load(path, allow_pickle=False) as z:
        return {name: Split(z[f"{name}_noisy"], z[f"{name}_clean"], z[f"{name}_snr_db"], z[f"{name}_noise"])
                for name in ("train", "val", "test")}


# --- signal processing ------------------------------------------------------------------------------


def _window() -> torch.Tensor:
    return torch.hann_window(NFFT, periodic=True, dtype=torch.float64).sqrt()


def stft(x) -> torch.Tensor:
    """(n, samples) -> complex (n, frames, 257); nfft 512, hop 128, sqrt-Hann (perfect reconstruction)."""
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    spec = torch.stft(x.to(torch.float64), NFFT, HOP, window=_window(), center=True, return_complex=True)
    return spec.transpose(-1, -2)


def istft(spec: torch.Tensor, length: int) -> torch.Tensor:
    return torch.istft(spec.transpose(-1, -2), NFFT, HOP, window=_window(), center=True, length=length)


def features(mag: torch.Tensor) -> torch.Tensor:
    """Model input from the noisy magnitude: log(1 + 100 |X|), float32 (host-side compression)."""
    return torch.log1p(100.0 * mag).float()


def apply_mask(spec: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Clean estimate |X| (1 + m) with the noisy phase (the magnitude is kept non-negative)."""
    gain = torch.clamp(1.0 + mask.to(spec.real.dtype), min=0.0)
    return spec * gain


def si_snr(est, ref, eps: float = 1e-8):
    """Scale-invariant SNR in dB per clip (zero-mean signals), numpy or torch, (..., samples)."""
    if isinstance(est, torch.Tensor):
        est = est - est.mean(-1, keepdim=True)
        ref = ref - ref.mean(-1, keepdim=True)
        proj = (est * ref).sum(-1, keepdim=True) / ((ref * ref).sum(-1, keepdim=True) + eps) * ref
        return 10 * torch.log10(((proj ** 2).sum(-1) + eps) / (((est - proj) ** 2).sum(-1) + eps))
    est = np.asarray(est, np.float64)
    ref = np.asarray(ref, np.float64)
    return si_snr(torch.from_numpy(est), torch.from_numpy(ref)).numpy()


def stoi(est: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Short-time objective intelligibility per clip (pystoi); clips shorter than its window give NaN."""
    from pystoi import stoi as _stoi

    return np.array([_stoi(r, e, SR, extended=False) for e, r in zip(np.asarray(est), np.asarray(ref))])
