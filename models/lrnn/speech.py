"""Real recorded speech for the denoiser, read from Debian packages installed on this machine (no download).

Talkers (``TALKERS``), each a folder of recordings one package ships, with a fixed role:

- ``train``: KLettres' letter and syllable recordings in 17 languages (``klettres-data``, wideband, Ogg
  Vorbis, one volunteer voice per language) and Asterisk's Russian prompts (``asterisk-core-sounds-ru-wav``,
  a female voice, 8 kHz telephone band);
- ``val``: KLettres Dutch and Brazilian Portuguese, never trained on (model selection may read them);
- ``test``: KLettres German and Asterisk's Italian prompts by Menardi (``asterisk-prompt-it-menardi-wav``,
  8 kHz), read by nothing but the real-talker evaluation.

``RESERVED`` names recordings kept for independent checks (Asterisk's core English, Spanish, French and
Italian voices, which are Allison, June and Carlo; alsa-utils' and KTuberling's voices; pyannote's sample):
no role reads them, and ``read_talker`` refuses a folder under one of them.

Each talker's recordings are resampled to 16 kHz, mono, trimmed of leading and trailing silence and joined
into passages of continuous speech (short pauses between recordings), which the data code places in clips as
it places espeak-ng sentences.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError

SR = 16_000
KLETTRES = Path("/usr/share/klettres")
ASTERISK = Path("/usr/share/asterisk/sounds")
RESERVED = ("en_US_f_Allison", "es_MX_f_Allison", "fr_CA_f_June", "it_IT_m_Carlo", "/usr/share/sounds/alsa",
            "ktuberling", "pyannote")


@dataclass(frozen=True)
class Talker:
    name: str
    package: str
    folder: Path
    role: str  # train, val or test
    narrowband: bool = False  # recorded through an 8 kHz telephone path

    def files(self) -> list[Path]:
        return sorted(p for p in self.folder.rglob("*") if p.suffix.lower() in (".wav", ".ogg") and p.is_file())


def _klettres(lang: str, role: str) -> Talker:
    return Talker(f"klettres-{lang}", "klettres-data", KLETTRES / lang, role)


TALKERS = tuple(
    [_klettres(lang, "train") for lang in ("ar", "cs", "da", "en", "en_GB", "es", "fr", "he", "hu", "it", "lt", "ml",
                                           "nb", "nds", "ru", "tn", "uk")]
    + [Talker("asterisk-ru", "asterisk-core-sounds-ru-wav", ASTERISK / "ru_RU_f_IvrvoiceRU", "train", True)]
    + [_klettres("nl", "val"), _klettres("pt_BR", "val")]
    + [_klettres("de", "test"),
       Talker("asterisk-it-menardi", "asterisk-prompt-it-menardi-wav", ASTERISK / "it_IT_f_Menardi", "test", True)])
PACKAGES = tuple(sorted({t.package for t in TALKERS}))


def talkers(role: str) -> list[Talker]:
    if role not in ("train", "val", "test"):
        raise EdgesmithError(f"unknown talker role {role!r}.", "use train, val or test.")
    return [t for t in TALKERS if t.role == role]


def missing_packages(role: str | None = None) -> list[str]:
    """Packages whose talkers (of ``role``, or all) are not installed here."""
    chosen = TALKERS if role is None else talkers(role)
    return sorted({t.package for t in chosen if not t.files()})


def require(role: str) -> None:
    missing = missing_packages(role)
    if missing:
        how = "apt-get install -y " + " ".join(missing)
        raise EdgesmithError(f"the real {role} speech needs Debian packages that are not installed: {', '.join(missing)}.",
                             f"run `make setup` or `{how}`." if shutil.which("apt-get") else f"install {how.split(' -y ')[1]}.")


def _read(path: Path) -> np.ndarray:
    """One recording, mono float64 at 16 kHz."""
    import soundfile as sf

    from edgesmith.models.lrnn.audio import resample

    x, rate = sf.read(str(path), dtype="float64", always_2d=True)
    return resample(x.mean(axis=1), int(rate), SR)


def _trim(x: np.ndarray, floor_db: float = -40.0) -> np.ndarray:
    """``x`` without the leading and trailing stretches quieter than ``floor_db`` below its 10 ms peak level."""
    win = SR // 100
    n = len(x) // win
    if n == 0:
        return x
    level = np.sqrt(np.mean(x[: n * win].reshape(n, win) ** 2, axis=1))
    loud = np.flatnonzero(level > level.max() * 10 ** (floor_db / 20))
    return x[loud[0] * win : (loud[-1] + 1) * win] if len(loud) else x


def read_talker(talker: Talker) -> list[np.ndarray]:
    """Every recording of ``talker``, trimmed, each scaled to unit RMS."""
    if any(r in str(talker.folder) for r in RESERVED):
        raise EdgesmithError(f"{talker.folder} is reserved for independent checks.", "pick another talker.")
    files = talker.files()
    if not files:
        raise EdgesmithError(f"talker {talker.name}: no recordings in {talker.folder}.",
                             f"install the Debian package {talker.package}.")
    out = []
    for f in files:
        x = _trim(_read(f))
        rms = float(np.sqrt(np.mean(x ** 2))) if len(x) else 0.0
        if len(x) >= SR // 10 and rms > 1e-5:
            out.append((x / rms).astype(np.float32))
    return out


def passages(talker: Talker, n: int, seconds: float, seed: int) -> list[np.ndarray]:
    """``n`` stretches of ``talker``'s continuous speech of about ``seconds``: random recordings of theirs joined
    with pauses of 50-400 ms, each recording at a level within 6 dB of the others."""
    rng = np.random.default_rng(seed)
    pool = read_talker(talker)
    out = []
    for _ in range(n):
        parts, length = [], 0
        while length < seconds * SR:
            x = pool[int(rng.integers(len(pool)))] * 10 ** (rng.uniform(-3, 3) / 20)
            gap = np.zeros(int(rng.uniform(0.05, 0.4) * SR), np.float32)
            parts += [x, gap]
            length += len(x) + len(gap)
        out.append(np.concatenate(parts[:-1]).astype(np.float32))
    return out


def speech_pool(role: str, per_talker: int, seconds: float, seed: int) -> list[np.ndarray]:
    """Passages of every talker of ``role``, ``per_talker`` each (talker i seeded ``seed + i``)."""
    require(role)
    return [p for i, t in enumerate(talkers(role)) for p in passages(t, per_talker, seconds, seed + i)]


def narrowband(x: np.ndarray) -> np.ndarray:
    """``x`` (16 kHz) through an 8 kHz telephone path: nothing above 4 kHz is left."""
    from edgesmith.models.lrnn.audio import resample

    return resample(resample(np.asarray(x, np.float64), SR, 8_000), 8_000, SR)[: len(x)].astype(np.float32)


def mixtures(role: str, snrs_db=(-5.0, 0.0, 5.0, 10.0), per_cell: int = 2, clip_s: float = 4.0, seed: int = 7):
    """A balanced noisy set of ``role``'s talkers: every talker x noise type x SNR, ``per_cell`` clips each, speech
    at -35..-15 dBFS, no reverberation, noise at 16 kHz (a telephone-band talker keeps its band, the noise does not:
    a recording played back in a noisy room); babble is a crowd of the other ``val``/``test`` talkers."""
    from edgesmith.models.lrnn.data import NOISES, Split, _place, make_noise

    require("val"), require(role)
    rng = np.random.default_rng(seed)
    length = int(round(clip_s * SR))
    chosen = talkers(role)
    own = {t.name: passages(t, 2 * per_cell * len(snrs_db), clip_s + 1.0, seed + 31 * i) for i, t in enumerate(chosen)}
    crowd = {t.name: passages(t, 6, clip_s + 1.0, seed + 1000 + i) for i, t in enumerate(talkers("val") + talkers("test"))}
    noisy, clean, snr, kind, who = [], [], [], [], []
    for t in chosen:
        k = 0
        for noise in NOISES:
            for db in snrs_db:
                for _ in range(per_cell):
                    s = _place(own[t.name][k % len(own[t.name])], length, rng)
                    k += 1
                    s *= 10 ** (rng.uniform(-35, -15) / 20) / (np.sqrt(np.mean(s ** 2)) + 1e-12)
                    others = [p for name, ps in crowd.items() if name != t.name for p in ps]
                    n = make_noise(noise, length, rng, others) * np.sqrt(np.mean(s ** 2)) * 10 ** (-db / 20)
                    peak = max(1.0, float(np.abs(s + n).max()) / 0.99)
                    noisy.append((s + n) / peak), clean.append(s / peak)
                    snr.append(db), kind.append(noise), who.append(t.name)
    split = Split(np.stack(noisy).astype(np.float32), np.stack(clean).astype(np.float32), np.array(snr, np.float32),
                  np.array(kind))
    return split, np.array(who)
