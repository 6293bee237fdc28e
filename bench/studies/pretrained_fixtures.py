"""Real pretrained models that wheels ship, and data made on this machine to score them on.

The test extra installs ``silero-vad`` (its wheel carries Silero VAD's ONNX files); ``make`` installs
``rapidocr-onnxruntime`` without its dependencies (only its three PP-OCR ONNX files are read, never its OpenCV
pipeline). Nothing is downloaded at run time. The data: speech spoken by espeak-ng over noise for the VAD, with a
speech/non-speech label per 32 ms frame from the clean signal's energy; text lines rendered with matplotlib's DejaVu
font for PP-OCR's text-direction classifier (half of them upside down) and recognizer, and pages of such lines for its
detector.
"""
from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import numpy as np

PACKAGES = {  # package -> how the test environment gets it
    "silero_vad": "pip install silero-vad==6.2.3 (the test extra)",
    "rapidocr_onnxruntime": "pip install --no-deps rapidocr-onnxruntime==1.4.4 (make test does)",
}


def packaged_model(package: str, relpath: str) -> Path:
    """The file ``relpath`` inside an installed package, found without importing it (rapidocr's ``__init__`` needs
    OpenCV, which the tests do not install)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {package} is not installed: {PACKAGES[package]}")
    path = Path(next(iter(spec.submodule_search_locations))) / relpath
    if not path.is_file():
        raise RuntimeError(f"{package} has no {relpath}: {PACKAGES[package]}")
    return path


def silero_vad() -> Path:
    return packaged_model("silero_vad", "data/silero_vad.onnx")


def ppocr(name: str) -> Path:
    """PP-OCR's ``cls`` (text direction, 0 or 180 degrees), ``det`` (text detection) or ``rec`` (recognition)."""
    files = {"cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx", "det": "ch_PP-OCRv4_det_infer.onnx",
             "rec": "ch_PP-OCRv4_rec_infer.onnx"}
    return packaged_model("rapidocr_onnxruntime", f"models/{files[name]}")


VAD_HOP, VAD_CONTEXT = 512, 64  # Silero VAD at 16 kHz: 512 new samples per call, after the last 64 of the previous


def vad_sequences(n: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(frames (n, steps, 576) float32, labels (n, steps) 0/1): one espeak-ng utterance per sequence, placed at a
    random offset in noise (white, pink or babble-free hum) at 10-30 dB SNR; a frame is speech when the clean
    signal's energy in its 512 new samples is within 35 dB of the utterance's loudest frame."""
    from edgesmith.models.lrnn.data import HELDOUT, make_noise, utterances

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as work:
        speech = utterances(HELDOUT, n, seed, Path(work))
    length = steps * VAD_HOP + VAD_CONTEXT
    frames, labels = [], []
    for s in speech:
        s = np.asarray(s[: length // 2], np.float64)
        s = s / (np.abs(s).max() + 1e-9) * rng.uniform(0.1, 0.6)
        clean = np.zeros(length)
        start = int(rng.integers(VAD_CONTEXT, length - len(s) + 1))
        clean[start:start + len(s)] = s
        noise = make_noise(str(rng.choice(["white", "pink", "hum"])), length, rng)
        snr = rng.uniform(10, 30)
        noise = noise / (np.sqrt(np.mean(noise ** 2)) + 1e-12) * np.sqrt(np.mean(s ** 2)) * 10 ** (-snr / 20)
        x = clean + noise
        frames.append(np.stack([x[t * VAD_HOP: t * VAD_HOP + VAD_HOP + VAD_CONTEXT] for t in range(steps)]))
        energy = np.array([np.mean(clean[VAD_CONTEXT + t * VAD_HOP: VAD_CONTEXT + (t + 1) * VAD_HOP] ** 2)
                           for t in range(steps)])
        labels.append((energy > energy.max() * 10 ** (-35 / 10)).astype(np.float32))
    return np.stack(frames).astype(np.float32), np.stack(labels)


WORDS = ("invoice", "total", "date", "amount", "paid", "order", "number", "address", "street", "phone", "price",
         "quantity", "item", "account", "balance", "receipt", "station", "platform", "departure", "arrival", "2026",
         "12.50", "No. 4471", "EUR", "Tel.", "www.example.org", "Hamburg", "London", "Oslo", "Lyon")


def _line(rng, font_path, words: int):
    from PIL import Image, ImageDraw, ImageFont

    text = " ".join(rng.choice(WORDS, size=words))
    font = ImageFont.truetype(font_path, int(rng.integers(22, 34)))
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(2, 8))
    ink, paper = int(rng.integers(0, 80)), int(rng.integers(190, 256))
    img = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), paper)
    ImageDraw.Draw(img).text((pad - left, pad - top), text, font=font, fill=ink)
    return img


def text_lines(n: int, seed: int, width: int = 192, flip: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 3, 48, width) float32 as PP-OCR's classifier (width 192) and recognizer (320) take them, labels (n,)
    int64: 1 when upside down, every second line when ``flip``)."""
    from matplotlib import font_manager
    from PIL import Image

    rng = np.random.default_rng(seed)
    font_path = font_manager.findfont("DejaVu Sans")
    images, labels = [], []
    for i in range(n):
        img = _line(rng, font_path, int(rng.integers(1, 4)))
        flipped = flip and i % 2 == 1
        if flipped:
            img = img.rotate(180)
        w = min(width, int(np.ceil(48 * img.width / img.height)))  # PP-OCR's resize: height 48, width padded
        arr = np.asarray(img.convert("RGB").resize((w, 48), Image.BILINEAR), np.float32) / 255.0
        canvas = np.zeros((3, 48, width), np.float32)
        canvas[:, :, :w] = (arr.transpose(2, 0, 1) - 0.5) / 0.5
        images.append(canvas)
        labels.append(int(flipped))
    return np.stack(images), np.asarray(labels, np.int64)


def text_pages(n: int, seed: int, size: int = 320) -> np.ndarray:
    """Pages (n, 3, size, size) float32 of 3-6 text lines at random places, normalised as PP-OCR's detector takes
    them (ImageNet mean and deviation)."""
    from matplotlib import font_manager
    from PIL import Image

    rng = np.random.default_rng(seed)
    font_path = font_manager.findfont("DejaVu Sans")
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    pages = []
    for _ in range(n):
        page = Image.new("L", (size, size), int(rng.integers(200, 256)))
        for _ in range(int(rng.integers(3, 7))):
            line = _line(rng, font_path, int(rng.integers(1, 3)))
            line = line.resize((min(line.width, size - 8), line.height))
            page.paste(line, (int(rng.integers(0, size - line.width + 1)), int(rng.integers(0, size - line.height + 1))))
        arr = np.asarray(page.convert("RGB"), np.float32) / 255.0
        pages.append(((arr - mean) / std).transpose(2, 0, 1))
    return np.stack(pages).astype(np.float32)
