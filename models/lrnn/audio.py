"""The user's own audio for the denoiser: a folder of WAV files as a ``Split``.

Layouts: ``DIR/noisy/*.wav`` with ``DIR/clean/*.wav`` of the same names (scored by SI-SNR against the
clean speech), or plain ``DIR/*.wav`` (noisy only: enough for calibration). Any sample rate (resampled
to 16 kHz with a polyphase filter), mono or multi-channel (channels averaged), integer or float PCM.
Clips are padded with zeros to the longest one, as the model runs whole clips of one length.
"""
from __future__ import annotations

import warnings
from math import gcd
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError, raised, regular_file
from edgesmith.models.lrnn.data import SR, Split


MIN_RATE, MAX_RATE = 4_000, 384_000  # sample rates read as audio: a header outside is damaged (1 Hz grew 20 GB)


def read_pcm(path: Path) -> tuple[int, np.ndarray, np.dtype]:
    """(rate, (samples, channels) float64 in [-1, 1], the file's sample dtype) of one WAV file."""
    from scipy.io import wavfile

    regular_file(path, "audio file")
    try:
        with warnings.catch_warnings():  # scipy warns on chunks it skips (LIST, cue): not the user's problem
            warnings.simplefilter("ignore")
            rate, x = wavfile.read(str(path))
    except Exception as e:  # ValueError, OSError, EOFError, struct.error (a truncated header)...
        raise EdgesmithError(f"{path}: not a readable WAV file ({raised(e, 120)}).",
                             "pass 16/24/32-bit PCM or float WAV files.") from None
    if not MIN_RATE <= rate <= MAX_RATE:
        raise EdgesmithError(f"{path}: its header says {rate:,} samples per second, outside {MIN_RATE:,}-{MAX_RATE:,} Hz.",
                             "the header is damaged or the file is not audio; re-export it at a real audio rate.")
    if x.size == 0:
        raise EdgesmithError(f"{path}: the WAV file holds no samples.", "pass a recording of at least one sample.")
    dtype = x.dtype
    if dtype.kind == "i":
        y = x.astype(np.float64) / float(np.iinfo(dtype).max)
    elif dtype.kind == "u":
        y = (x.astype(np.float64) - 128.0) / 128.0
    else:
        y = x.astype(np.float64)
    y = y.reshape(len(y), -1)
    if not np.all(np.isfinite(y)):
        raise EdgesmithError(f"{path}: the audio holds NaN/inf samples.", "pass finite audio.")
    return int(rate), y, dtype


def resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """``x`` at rate ``src`` -> rate ``dst`` (polyphase filter); unchanged when the rates agree."""
    from scipy.signal import resample_poly

    if src == dst:
        return x
    g = gcd(int(src), int(dst))
    return resample_poly(x, int(dst) // g, int(src) // g)


def read_wav(path: Path) -> tuple[np.ndarray, list[str]]:
    """One WAV file as float32 in [-1, 1] at 16 kHz (channels averaged), and what was done to it."""
    rate, x, _ = read_pcm(path)
    notes = []
    if x.shape[1] > 1:
        notes.append(f"{path.name}: channels averaged")
    x = x.mean(axis=1)
    if rate != SR:
        notes.append(f"{path.name}: resampled {rate} Hz -> {SR} Hz")
    return resample(x, rate, SR).astype(np.float32), notes


def _pad(clips: list[np.ndarray], n: int) -> np.ndarray:
    return np.stack([np.pad(c, (0, n - len(c))) for c in clips]).astype(np.float32)


def wav_files(folder: Path) -> list[Path]:
    """The folder's WAV files, whatever the case of their extension (B.WAV too), by name."""
    return sorted(f for f in Path(folder).iterdir() if f.suffix.lower() == ".wav" and f.is_file())


def is_wav_folder(path) -> bool:
    p = Path(path)
    return p.is_dir() and (bool(wav_files(p)) or (p / "noisy").is_dir())


def load_wav_folder(folder, what: str = "evaluation data") -> tuple[Split, bool, list[str]]:
    """(split, has_clean, notes): the folder's clips; without a clean/ folder ``clean`` repeats ``noisy``."""
    folder = Path(folder)
    noisy_dir = folder / "noisy" if (folder / "noisy").is_dir() else folder
    files = wav_files(noisy_dir)
    if not files:
        raise EdgesmithError(f"{what}: {folder} holds no .wav files.",
                             "put WAV files in it, or noisy/ and clean/ folders of WAV files with the same names.")
    clean_dir = folder / "clean"
    has_clean = clean_dir.is_dir()
    clean_files = {f.name.lower(): f for f in wav_files(clean_dir)} if has_clean else {}
    notes: list[str] = []
    noisy, clean = [], []
    for f in files:
        x, n = read_wav(f)
        noisy.append(x), notes.extend(n)
        if has_clean:
            c_path = clean_files.get(f.name.lower(), clean_dir / f.name)  # x.WAV pairs with x.wav
            if not c_path.exists():
                raise EdgesmithError(f"{what}: {f.name} has no clean reference {c_path}.",
                                     "give every noisy file a clean file of the same name.")
            c, n = read_wav(c_path)
            notes.extend(n)
            if len(c) != len(x):
                raise EdgesmithError(f"{what}: {f.name}: noisy and clean differ in length ({len(x)} vs {len(c)} "
                                     f"samples at {SR} Hz).", "pair recordings of the same length.")
            clean.append(c)
    n = max(len(x) for x in noisy)
    noisy_a = _pad(noisy, n)
    clean_a = _pad(clean, n) if has_clean else noisy_a.copy()
    split = Split(noisy_a, clean_a, np.full(len(files), np.nan), np.array([f.name for f in files]))
    notes.insert(0, f"{what}: {len(files)} WAV clip(s) from {folder}, padded to {n / SR:.2f} s"
                 + ("" if has_clean else " (no clean/ folder: not scored)"))
    return split, has_clean, notes
