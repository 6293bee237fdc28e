"""Noisy-speech data made on this machine: espeak-ng talkers + recorded-free noises, 16 kHz, fixed splits.

No download. Speech: random sentences spoken by ``espeak-ng`` (accent + voice variant, speed and pitch drawn
per utterance), resampled 22.05 -> 16 kHz. Two disjoint worlds (``TRAIN`` and ``HELDOUT``): their accents,
voice variants and vocabularies share nothing, so the held-out test split has voices and sentences the
model never heard. Noise (``NOISES``): white, pink, brown, amplitude-modulated, mains hum, babble of 6-12 real
talkers (espeak-ng utterances of the same world, never the target sentence, each in its own room: a crowd), keyboard-like clicks, tone
sequences (alarms, melodies) and wind gusts; each clip draws its own noise, so held-out noise is new audio.
Augmentation: speech level -35..-15 dBFS, a synthetic room (exponentially decaying noise tail, RT60
0.15-0.6 s) with probability ``reverb_p`` (the target is then the reverberant speech: this is a denoiser,
not a dereverberator), SNR from ``DataConfig.snrs_db``. The train and validation splits use the ``TRAIN``
world; the test split is the held-out set. Splits are cached under ``edgesmith.common.cache_dir()`` by a
hash of the config.

Signal processing of the paper (Intel N-DNS setting): STFT with nfft 512, hop 128 (8 ms at 16 kHz)
and a periodic Hann window; the model sees the magnitude (log-compressed, ``features``) and returns
a mask ``m``; the clean estimate is ``|X| (1 + m)`` with the noisy phase (``apply_mask``).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from edgesmith.common import EdgesmithError, atomic_path, build_lock, cache_dir, scratch_dir
from edgesmith.models.lrnn.config import Config

SR = 16_000
NFFT = 512
HOP = 128
N_BINS = NFFT // 2 + 1
NOISES = ("white", "pink", "brown", "modulated", "hum", "babble", "clicks", "tones", "wind")
# bumped whenever the clips a config makes change: it is part of every cache key built on the data
DATA_VERSION = 3


@dataclass(frozen=True)
class World:
    """Who speaks and what they say: espeak-ng accents x voice variants, and a vocabulary."""

    accents: tuple[str, ...]
    variants: tuple[str, ...]
    words: tuple[str, ...]

    def voice(self, rng: np.random.Generator) -> str:
        variant = str(rng.choice(self.variants))
        return str(rng.choice(self.accents)) + (f"+{variant}" if variant else "")


TRAIN = World(
    accents=("en-us", "en-gb", "en-gb-scotland", "en-029", "en-gb-x-rp"),
    variants=("", "m1", "m2", "m3", "m4", "f1", "f2", "f3", "klatt", "klatt2", "Andy", "Annie", "adam", "ed",
              "grandma", "john", "linda", "max", "paul"),
    words=tuple((
        "the a one two three four five six seven eight nine ten red green blue yellow black white small large "
        "quick slow happy quiet loud bright dark warm cold early late river mountain city garden window table "
        "water music paper engine signal sensor robot model network morning evening winter summer spring autumn "
        "travel listen speak open close start stop build carry follow bring watch learn teach write read move "
        "under over after before near far inside outside always never often today tomorrow yesterday because "
        "station market doctor teacher student friend family animal forest ocean island bridge tower street "
        "number letter question answer picture story voice sound light power energy battery circuit memory"
    ).split()),
)
HELDOUT = World(
    accents=("en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc"),
    variants=("m5", "m6", "m7", "f4", "f5", "klatt4", "Alicia", "belinda", "benjamin", "david", "norbert"),
    words=tuple((
        "my your our their this that some every many few eleven twelve twenty hundred purple orange silver golden "
        "gentle brave careful honest strange simple famous ancient modern tiny huge kitchen library hospital "
        "airport village castle desert valley harbor meadow candle pillow blanket mirror ladder basket bottle "
        "coffee bread cheese apple lemon tomato carrot rabbit horse eagle dolphin tiger monkey dance jump climb "
        "swim paint cook clean wash sing laugh smile wonder remember forget promise borrow explain arrive leave "
        "quickly slowly softly suddenly rarely perhaps almost maybe during until through across against"
    ).split()),
)


@dataclass(frozen=True)
class DataConfig(Config):
    """Sizes of the splits (clips), clip length (s), mixing SNRs (dB), reverberation probability and the seed;
    ``tiny()`` for tests. ``n_utterances`` sentences per world are synthesized once and shared by the clips
    (as the target or as babble talkers)."""

    n_train: int = 2048
    n_val: int = 64
    n_test: int = 135
    clip_s: float = 2.0
    snrs_db: tuple[float, ...] = (-5.0, 0.0, 5.0, 10.0, 15.0)
    reverb_p: float = 0.3
    n_utterances: int = 600
    seed: int = 0
    real_p: float = 0.0  # share of train and val clips whose speech is a real recording (models/lrnn/speech.py)
    narrowband_p: float = 0.0  # share of train and val clips whose speech (and half the time the mix) is 8 kHz band

    def validate(self) -> None:
        for name in ("n_train", "n_val", "n_test"):
            if int(getattr(self, name)) < 1:
                self._fail(name, f"is {getattr(self, name)}", "use at least one clip per split.")
        if not 0.1 <= self.clip_s <= 30:
            self._fail("clip_s", f"is {self.clip_s}", "use a clip length from 0.1 to 30 s.")
        if not self.snrs_db:
            self._fail("snrs_db", "is empty", "give at least one mixing SNR in dB.")
        if not 0.0 <= self.reverb_p <= 1.0:
            self._fail("reverb_p", f"is {self.reverb_p}", "use a probability from 0 to 1.")
        for name in ("real_p", "narrowband_p"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                self._fail(name, f"is {getattr(self, name)}", "use a share from 0 to 1.")
        if self.n_utterances < 8:
            self._fail("n_utterances", f"is {self.n_utterances}", "use at least 8 sentences per world (babble needs talkers).")

    @classmethod
    def tiny(cls, seed: int = 0) -> "DataConfig":
        return cls(n_train=8, n_val=4, n_test=4, clip_s=0.5, n_utterances=16, seed=seed)

    def key(self) -> str:
        fields = asdict(self)
        for name in ("real_p", "narrowband_p"):  # settings added later: at 0 they leave the older keys as they were
            if not fields[name]:
                del fields[name]
        return hashlib.sha256(json.dumps({**fields, "version": DATA_VERSION}, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Split:
    """Time-domain clips of one split: ``noisy``/``clean`` (n, samples) float32, ``snr_db``, ``noise`` names.
    ``key`` names a producer's split by its recipe (data settings, data version, split name); empty for clips
    from elsewhere (a user's WAV files, a subset)."""

    noisy: np.ndarray
    clean: np.ndarray
    snr_db: np.ndarray
    noise: np.ndarray
    key: str = ""

    def __len__(self) -> int:
        return len(self.noisy)

    def subset(self, idx) -> "Split":
        return Split(self.noisy[idx], self.clean[idx], self.snr_db[idx], self.noise[idx])


class _CachedSplit(Split):
    """A split of the cache file whose arrays are made (once, for every split) and read when first used: naming
    it (its ``key``, what cache keys of fine-tuned models hash) costs nothing, so a deploy whose compressed models
    all come from the cache never synthesizes data, and the 0.5 GB of training clips load only when training
    needs them."""

    def __init__(self, path: Path, name: str, key: str, cfg: "DataConfig"):
        self._path, self._name, self.key, self._arrays, self._cfg = path, name, key, {}, cfg

    def _get(self, field: str) -> np.ndarray:
        if field not in self._arrays:
            _ensure(self._cfg, self._path)
            with np.load(self._path, allow_pickle=False) as z:
                self._arrays[field] = z[f"{self._name}_{field}"]
        return self._arrays[field]

    noisy = property(lambda self: self._get("noisy"))
    clean = property(lambda self: self._get("clean"))
    snr_db = property(lambda self: self._get("snr_db"))
    noise = property(lambda self: self._get("noise"))


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


def utterances(world: World, n: int, seed: int, workdir: Path) -> list[np.ndarray]:
    """``n`` sentences of 3-10 words of ``world``'s vocabulary, each by a voice of ``world``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = rng.choice(world.words, size=int(rng.integers(3, 11)))
        x = synthesize(" ".join(words), world.voice(rng), int(rng.integers(130, 200)), int(rng.integers(25, 85)),
                       workdir)
        nz = np.flatnonzero(np.abs(x) > 1e-4)  # espeak pads silence at both ends
        out.append(x[nz[0] : nz[-1] + 1] if len(nz) else x)
    return out


def _place(x: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """``x`` cut to ``length`` (at a random offset) or placed at a random offset in zeros."""
    out = np.zeros(length, np.float32)
    if len(x) >= length:
        start = int(rng.integers(0, len(x) - length + 1))
        out[:] = x[start : start + length]
    else:
        start = int(rng.integers(0, length - len(x) + 1))
        out[start : start + len(x)] = x
    return out


def _unit(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (x / (np.sqrt(np.mean(x ** 2)) + 1e-12)).astype(np.float32)


def make_noise(kind: str, n: int, rng: np.random.Generator, talkers: list[np.ndarray] | None = None) -> np.ndarray:
    """One of ``NOISES``, ``n`` samples, unit RMS; ``babble`` sums 6-12 of ``talkers`` (utterances)."""
    t = np.arange(n) / SR
    white = rng.standard_normal(n)
    f = np.maximum(np.fft.rfftfreq(n, 1 / SR), 20.0)
    if kind == "white":
        x = white
    elif kind in ("pink", "brown"):
        spec = np.fft.rfft(white)
        spec /= np.sqrt(f) if kind == "pink" else f
        x = np.fft.irfft(spec, n)
    elif kind == "modulated":
        rate = rng.uniform(2.0, 8.0)
        x = white * (1.0 + 0.9 * np.sin(2 * np.pi * rate * t + rng.uniform(0, 2 * np.pi)))
    elif kind == "hum":
        f0 = rng.choice([50.0, 60.0]) * rng.uniform(0.98, 1.02)
        x = sum(np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 12))
        x = x + 0.1 * white
    elif kind == "babble":
        if not talkers:
            raise EdgesmithError("babble noise needs talkers (utterances to sum).", "pass talkers=[...] to make_noise.")
        # a crowd, not a competing talker: 6-12 talkers at similar levels, each through its own room (diffuse)
        picks = rng.choice(len(talkers), size=min(len(talkers), int(rng.integers(6, 13))), replace=False)
        x = sum(_unit(room(_place(np.tile(talkers[i], 1 + n // max(1, len(talkers[i]))), n, rng), rng))
                * 10 ** (rng.uniform(-3, 0) / 20) for i in picks)
    elif kind == "clicks":  # keyboard / dishes: decaying bursts of band-passed noise at random times
        x = 0.02 * white
        for _ in range(int(rng.integers(4, 12) * n / SR) + 1):
            at, dur = int(rng.integers(0, n)), int(rng.uniform(0.005, 0.04) * SR)
            seg = rng.standard_normal(dur) * np.exp(-np.arange(dur) / (dur / 5)) * rng.uniform(0.3, 1.0)
            seg = np.diff(seg, prepend=0.0) if rng.random() < 0.5 else seg  # brighter clicks
            x[at : at + dur] += seg[: n - at]
    elif kind == "tones":  # alarms and melodies: a sequence of notes with a few harmonics
        x, pos = np.zeros(n), 0
        while pos < n:
            dur = int(rng.uniform(0.08, 0.4) * SR)
            f0 = 220.0 * 2 ** (int(rng.integers(0, 30)) / 12)
            tt = np.arange(min(dur, n - pos)) / SR
            note = sum(np.sin(2 * np.pi * f0 * k * tt) * rng.uniform(0.2, 1.0) / k for k in range(1, 5))
            x[pos : pos + len(tt)] = note * np.minimum(1.0, np.minimum(tt, tt[::-1]) / 0.01 + 1e-3)
            pos += dur + int(rng.uniform(0.0, 0.15) * SR)
        x = x + 0.01 * white
    elif kind == "wind":  # low-passed noise with slow gusts
        spec = np.fft.rfft(white) / (1.0 + (f / rng.uniform(150, 600)) ** 2)
        gust = np.fft.irfft(np.fft.rfft(rng.standard_normal(n)) * (np.fft.rfftfreq(n, 1 / SR) < rng.uniform(0.5, 2)), n)
        x = np.fft.irfft(spec, n) * (1.0 + 2.0 * np.abs(gust) / (np.abs(gust).max() + 1e-12))
    else:
        raise EdgesmithError(f"unknown noise kind {kind!r}.", f"use one of {', '.join(NOISES)}.")
    return _unit(x)


def room(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x`` in a synthetic room: direct path + exponentially decaying noise tail (RT60 0.15-0.6 s)."""
    from scipy.signal import fftconvolve

    rt60 = rng.uniform(0.15, 0.6)
    tt = np.arange(int(rt60 * SR)) / SR
    rir = rng.standard_normal(len(tt)) * np.exp(-6.9 * tt / rt60) * rng.uniform(0.05, 0.3)
    rir[0] = 1.0
    return fftconvolve(x, rir)[: len(x)].astype(np.float32)


def _make_split(n: int, cfg: DataConfig, seed: int, speech: list[np.ndarray], kinds_cycle=NOISES,
                balanced: bool = False, real: list[np.ndarray] | None = None) -> Split:
    """``n`` mixtures; noise kinds cycle through ``kinds_cycle``; ``balanced``: the SNRs cycle too (every
    kind at every SNR equally often, as a test set should be), else each clip draws its SNR. With ``real``
    passages, a share ``cfg.real_p`` of the clips speak them and ``cfg.narrowband_p`` pass an 8 kHz band
    (only the speech, or half the time the whole mixture: a phone call in a noisy room, or a noisy line)."""
    from edgesmith.models.lrnn.speech import narrowband

    rng = np.random.default_rng(seed)
    length = int(round(cfg.clip_s * SR))
    noisy, clean = np.zeros((n, length), np.float32), np.zeros((n, length), np.float32)
    snrs, kinds = np.zeros(n, np.float32), []
    for i in range(n):
        target = int(rng.integers(len(speech)))
        s = _place(speech[target], length, rng)
        band, talkers = "", speech[:target] + speech[target + 1 :]
        if real is not None:  # draws only where asked, so the clips of older settings keep their bytes
            pick = int(rng.integers(len(real)))
            if rng.random() < cfg.real_p:
                s = _place(real[pick], length, rng)
            talkers = talkers + real[:pick] + real[pick + 1 :]  # a crowd of real voices too
            if rng.random() < cfg.narrowband_p:
                band = "mix" if rng.random() < 0.5 else "speech"
                s = narrowband(s) if band == "speech" else s
        if rng.random() < cfg.reverb_p:
            s = room(s, rng)
        s *= 10 ** (rng.uniform(-35, -15) / 20) / (np.sqrt(np.mean(s ** 2)) + 1e-12)
        kind = kinds_cycle[i % len(kinds_cycle)] if n >= len(kinds_cycle) else str(rng.choice(kinds_cycle))
        draw = int(rng.integers(len(cfg.snrs_db)))
        snr = float(cfg.snrs_db[(i // len(kinds_cycle)) % len(cfg.snrs_db) if balanced else draw])
        noise = make_noise(kind, length, rng, talkers) * np.sqrt(np.mean(s ** 2)) * 10 ** (-snr / 20)
        mix = s + noise
        if band == "mix":  # the line's band limits speech and noise alike; the SNR is the wideband one
            s, mix = narrowband(s), narrowband(mix)
        peak = max(1.0, float(np.abs(mix).max()) / 0.99)  # no clipping: scale both, the SNR stays
        clean[i], noisy[i], snrs[i] = s / peak, mix / peak, snr
        kinds.append(kind)
    return Split(noisy, clean, snrs, np.array(kinds))


def _synthesize(cfg: DataConfig, path: Path) -> None:
    arrays = {}
    with scratch_dir("espeak") as tmp:
        pools = {"train": utterances(TRAIN, cfg.n_utterances, cfg.seed * 1000 + 1, Path(tmp)),
                 "heldout": utterances(HELDOUT, max(8, cfg.n_utterances // 3), cfg.seed * 1000 + 2, Path(tmp))}
        real = {}
        if cfg.real_p or cfg.narrowband_p:  # real talkers of their own for train and val; the test split stays synthesized
            from edgesmith.models.lrnn.speech import speech_pool

            real = {role: speech_pool(role, max(4, cfg.n_utterances // 20), cfg.clip_s + 1.0, cfg.seed * 1000 + 300 * k)
                    for k, role in enumerate(("train", "val"), start=1)}
        for j, (name, n, pool) in enumerate((("train", cfg.n_train, "train"), ("val", cfg.n_val, "train"),
                                             ("test", cfg.n_test, "heldout"))):
            # training sees babble twice as often: competing talkers are the hardest noise to learn
            cycle = NOISES + ("babble",) if name == "train" else NOISES
            split = _make_split(int(n), cfg, cfg.seed * 1000 + 17 * (j + 1), pools[pool], cycle,
                                balanced=name == "test", real=real.get(name))
            arrays.update({f"{name}_{k}": getattr(split, k) for k in ("noisy", "clean", "snr_db", "noise")})
    with atomic_path(path, force=True) as tmp_path:
        with open(tmp_path, "wb") as f:
            np.savez(f, **arrays)


def _ensure(cfg: DataConfig, path: Path) -> None:
    """The cache file of ``cfg``'s splits, made if missing; a damaged one is deleted with an error."""
    if not path.exists():
        with build_lock(path):  # parallel sweep cells with the same data settings synthesize it once
            if not path.exists():
                _synthesize(cfg, path)
    with np.load(path, allow_pickle=False) as z:  # a damaged file fails here, not at first use
        missing = {f"{n}_{f}" for n in ("train", "val", "test") for f in ("noisy", "clean", "snr_db", "noise")} - set(z.files)
    if missing:
        path.unlink(missing_ok=True)
        raise EdgesmithError(f"the cached denoiser data {path} lacks {sorted(missing)[0]}.", "run again: it was deleted and is made anew.")


def load_splits(cfg: DataConfig) -> dict[str, Split]:
    """{"train", "val", "test"} for ``cfg`` (test is the held-out world): made once, when first read, then read
    from the cache."""
    path = cache_dir() / "lrnn-data" / f"speech-{cfg.key()}.npz"
    return {name: _CachedSplit(path, name, f"{cfg.key()}/{name}", cfg) for name in ("train", "val", "test")}


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
