"""``edgesmith denoise IN --out OUT``: WAV in, WAV out, through an audio producer's model (the S5 denoiser).

IN is a WAV file or a folder of them. Every channel of every file is resampled to the model's rate
(polyphase filter), enhanced in cross-faded 4-second segments (any length), resampled back, put at the level
its speech had in the input (``--normalize``: peak just under full scale) and written with the input's rate,
channel count, length and sample format (16/32-bit integer or float PCM). ``variant`` picks the model the
host-cpu plan builds: ``dense`` (the float model), ``sparse`` (90% pruned, float) or ``fixed`` (pruned,
quantization-aware fine-tuned, w8a16 fixed point); ``runtime`` where it runs (``RUNTIMES``). The
compressed variants are built by the plan's own passes from the shipped weights (cached after the first
run; nothing trains). Each file's record carries its real-time factors (processing seconds per second of
audio: the whole file, and the model alone). Outputs are written atomically and never replace a file
without ``force``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from edgesmith.bench.apps import App, register_app
from edgesmith.common import EdgesmithError, atomic_path, check_output, scratch_dir

VARIANTS = {"dense": "dense", "sparse": "sparse", "fixed": "sparse-fixed"}
# the runtimes each variant runs in, the default first: torch runs the float model on a whole clip (its
# recurrence as an FFT convolution), onnxruntime its exported streaming step frame by frame with the state
# carried, lrnn-ref the fixed-point network in Numba and lava the same network in Lava's Loihi 2 simulator
RUNTIMES = {"dense": ("torch", "onnxruntime"), "sparse": ("torch", "onnxruntime"), "fixed": ("lrnn-ref", "lava")}
FULL_SCALE = 0.999  # the output's peak limit, a fraction of the format's full scale (no clipped samples)
RUNTIME_NAMES = {"torch": "torch", "onnxruntime": "onnxruntime", "lrnn-ref": "lrnn-ref", "lava": "lava-lrnn"}


def _audio_producer(name: str | None, seed: int, options: dict):
    from edgesmith.models.base import get_producer, producer_class, producer_names

    audio = [n for n in producer_names() if getattr(producer_class(n), "audio_rate", None)]
    if name is None:
        if len(audio) != 1:
            raise EdgesmithError(f"several audio models are registered ({', '.join(audio)}).", "pick one with --model.")
        name = audio[0]
    if name not in audio:
        raise EdgesmithError(f"{name} is not an audio model.", f"use one of: {', '.join(audio) or 'none registered'}.")
    return get_producer(name, seed=seed, **options)


def check_choice(variant: str, runtime: str | None) -> str:
    """The runtime ``variant`` runs in (its default when None); a clear error for a pair that does not exist."""
    if variant not in VARIANTS:
        raise EdgesmithError(f"unknown variant {variant!r}.", f"use one of: {', '.join(VARIANTS)}.")
    if runtime is None:
        return RUNTIMES[variant][0]
    if runtime not in RUNTIMES[variant]:
        where = [v for v, rts in RUNTIMES.items() if runtime in rts]
        raise EdgesmithError(f"the {variant} variant does not run in {runtime!r}.",
                             f"use --runtime {' or '.join(RUNTIMES[variant])}"
                             + (f", or --variant {' or '.join(where)} for {runtime}." if where else "."))
    return runtime


def mask_function(producer, variant: str, runtime: str | None, workdir: Path, seed: int = 0):
    """The (variant, runtime) mask function, features (clips, frames, bins) -> masks: the variant is built by the
    host-cpu plan's passes (cached), onnxruntime adds the streaming-step export."""
    import torch

    from edgesmith.bench.pipeline.deploy import source_artifact
    from edgesmith.compress import Artifact, PassContext, run_passes
    from edgesmith.compress.export_step import ExportStepOnnxConfig
    from edgesmith.hardware import PlanOptions, get_target
    from edgesmith.runtimes import get_runtime
    from edgesmith.runtimes.stateful import recurrent_spec, run_sequence

    runtime = check_choice(variant, runtime)
    plan = get_target("host-cpu").plan(producer, PlanOptions(variants=[VARIANTS[variant]]))
    (v,) = plan.variants
    passes = list(v.passes) + ([ExportStepOnnxConfig()] if runtime == "onnxruntime" else [])
    if passes:
        ctx = PassContext(workdir=workdir, calibration=producer.calibration_data(32), seed=seed,
                          train_data=producer.training_data() if v.passes else None,
                          example_input=producer.example_inputs(1))
        art, _ = run_passes(source_artifact(producer), passes, ctx)
    else:
        art = source_artifact(producer)
    if runtime == "torch":  # a causal recurrent model: any number of frames in one call
        module = art.module.eval()

        def run(f):
            with torch.inference_mode():
                return module(torch.as_tensor(f, dtype=torch.float32)).numpy()
        return run
    shape = (art.meta or {}).get("input_shape")
    if shape:  # a stream model runs clips of any number of frames, whatever length it was calibrated on
        art = Artifact(art.format, art.path, art.module, {**art.meta, "input_shape": [None, *shape[1:]]})
    rt = get_runtime(RUNTIME_NAMES[runtime], threads=1).load(art)
    spec = recurrent_spec(art.meta or {})

    def run_rt(f):  # the runtime's own stats of the last call stay readable (Lava's simulation time, say)
        if spec is not None:  # the streaming step: frame by frame, the state carried
            out, run_rt.last_stats = run_sequence(rt, spec, np.asarray(f, np.float32))
            return out
        res = rt.run(np.asarray(f, np.float32))
        run_rt.last_stats = res.stats
        return res.outputs
    return run_rt


def _to_dtype(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "i":
        top = np.iinfo(dtype).max
        return np.clip(np.rint(y * top), -top - 1, top).astype(dtype)
    if dtype.kind == "u":
        return np.clip(np.rint(y * 128.0 + 128.0), 0, 255).astype(dtype)
    return y.astype(dtype)


def pcm_bits(path: Path) -> int | None:
    """Bits per sample of an integer PCM WAV file from its fmt chunk (scipy reads 24-bit audio as int32)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    at = head.find(b"fmt ")
    return int.from_bytes(head[at + 22 : at + 24], "little") if at >= 0 and len(head) >= at + 24 else None


def _write_wav(path: Path, rate: int, data: np.ndarray, bits: int | None) -> None:
    """``data`` (samples, channels) in the file's format; 24-bit PCM is written as 24-bit (the wave module)."""
    if bits == 24 and data.dtype == np.int32:
        import wave

        b = (data.astype("<i4") >> 8).astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3]  # low 3 bytes
        with wave.open(str(path), "wb") as w:
            w.setnchannels(data.shape[1])
            w.setsampwidth(3)
            w.setframerate(rate)
            w.writeframes(b.tobytes())
        return
    from scipy.io import wavfile

    wavfile.write(str(path), rate, data[:, 0] if data.shape[1] == 1 else data)


# a long file is enhanced 4 s at a time, cross-faded over 0.5 s: the model is trained on 2-second clips, and on a
# 60-second recording a state that runs on loses 0.7 dB (pink noise, 5 dB; bench/studies/denoise_real.py)
SEGMENT_S, OVERLAP_S = 4.0, 0.5


def _in_segments(piece, x: np.ndarray, seg: int, overlap: int) -> np.ndarray:
    """``piece`` applied to ``x`` in segments of ``seg`` samples that overlap by ``overlap``, cross-faded linearly:
    the model's memory (its STFT and mask, some 30x the samples) stays that of one segment whatever the file's length,
    and its state starts afresh every segment. A file of one segment is ``piece(x)`` exactly."""
    if len(x) <= seg:
        return piece(x)
    out = np.zeros(len(x))
    ramp = np.linspace(0.0, 1.0, overlap + 2)[1:-1]
    start = 0
    while True:
        stop = min(start + seg, len(x))
        w = np.ones(stop - start)
        if start > 0:
            w[:overlap] = ramp
        if stop < len(x):
            w[-overlap:] = ramp[::-1]
        out[start:stop] += piece(x[start:stop]) * w
        if stop == len(x):
            return out
        start = stop - overlap


def speech_level(y: np.ndarray, x: np.ndarray) -> float:
    """The gain that puts the enhanced ``y`` at the level its speech had in the input ``x``: the least-squares
    fit of ``x`` by ``g y`` (noise uncorrelated with the speech drops out of <y, x>), never above the gain that
    would make ``y`` as loud as the noisy input (the model is trained on a scale-invariant loss, so its own
    output level means nothing)."""
    yy = float(np.dot(y, y))
    if yy <= 0.0:
        return 1.0
    return float(np.clip(np.dot(y, x) / yy, 0.0, np.sqrt(float(np.dot(x, x)) / yy)))


def enhance(producer, mask_fn, x: np.ndarray, rate: int, segment_s: float = SEGMENT_S) -> np.ndarray:
    """One channel at ``rate`` -> enhanced, same length and rate, at its speech's level in the input, in cross-faded
    segments of ``segment_s`` (the model's state starts afresh in each)."""
    from edgesmith.models.lrnn.audio import resample

    model_rate = type(producer).audio_rate

    def piece(part: np.ndarray) -> np.ndarray:
        y = producer.enhance_waveform(mask_fn, resample(part, rate, model_rate).astype(np.float32))
        back = resample(np.asarray(y, np.float64), model_rate, rate)
        back = np.pad(back, (0, max(0, len(part) - len(back))))[: len(part)]
        return back * speech_level(back, part)  # per segment, so a level change in a long file is followed

    return _in_segments(piece, np.asarray(x, np.float64), int(segment_s * rate), int(OVERLAP_S * rate))


def denoise_file(producer, mask_fn, src: Path, dst: Path, force: bool = False, downmix: bool = False,
                 normalize: bool = False) -> dict:
    """One WAV file: every channel enhanced (or their mean, with ``downmix``) at its speech's level in the input
    (``normalize``: the file's peak raised to just under full scale instead); the record has the file's shape,
    its level change and its real-time factors."""
    import time

    from edgesmith.models.lrnn.audio import read_pcm

    rate, x, dtype = read_pcm(src)
    if downmix:
        x = x.mean(axis=1, keepdims=True)
    out = np.zeros_like(x)
    model_s = [0.0]

    def timed(f):
        t0 = time.perf_counter()
        m = mask_fn(f)
        model_s[0] += time.perf_counter() - t0
        return m

    t0 = time.perf_counter()
    for c in range(x.shape[1]):
        out[:, c] = enhance(producer, timed, x[:, c], rate)
    total_s = time.perf_counter() - t0
    audio_s = len(x) / rate * x.shape[1]
    # never clipped: the whole file (all channels alike, keeping their balance) is scaled under full scale
    peak = float(np.abs(out).max()) if out.size else 0.0
    gain = FULL_SCALE / peak if peak > FULL_SCALE or (normalize and peak > 0) else 1.0
    level_db = 10 * np.log10((float(np.mean((out * gain) ** 2)) + 1e-20) / (float(np.mean(x ** 2)) + 1e-20))
    data = _to_dtype(out * gain, dtype)
    with atomic_path(dst, force=force) as tmp:
        _write_wav(tmp, rate, data, pcm_bits(src) if dtype == np.int32 else None)
    return {"in": str(src), "out": str(dst), "rate": rate, "channels": int(x.shape[1]), "samples": int(len(x)),
            "resampled": rate != type(producer).audio_rate, "gain_db": 20 * np.log10(gain), "level_db": level_db, "audio_s": audio_s, "model_s": model_s[0], "total_s": total_s,
            "rtf_model": model_s[0] / audio_s if audio_s else None, "rtf": total_s / audio_s if audio_s else None}


def denoise(inp, out, *, model: str | None = None, variant: str = "dense", runtime: str | None = None,
            downmix: bool = False, normalize: bool = False, force: bool = False, seed: int = 0, model_options: dict | None = None, progress: bool = True) -> list[dict]:
    """Denoise a WAV file or a folder of them into ``out`` (a file, or a folder for a folder)."""
    runtime = check_choice(variant, runtime)

    from edgesmith.models.lrnn.audio import wav_files

    inp, out = Path(inp), Path(out)
    if inp.is_dir():
        files = wav_files(inp)
        if not files:
            raise EdgesmithError(f"{inp} holds no .wav files.", "pass a WAV file or a folder of WAV files.")
        targets = [out / f.name for f in files]
        if out.exists() and not out.is_dir():
            raise EdgesmithError(f"{out} is a file, but the input is a folder.", "pass a folder as --out.")
    elif inp.exists():
        files, targets = [inp], [out]
    else:
        raise EdgesmithError(f"{inp} does not exist.", "pass a WAV file or a folder of WAV files.")
    for t in targets:
        check_output(t, force=force, folder=False)
    from edgesmith.models.lrnn.audio import read_pcm

    for f in files:  # every input is checked before any work: a bad file fails the whole run up front
        read_pcm(f)
    producer = _audio_producer(model, seed, model_options or {}).build()
    with scratch_dir("denoise") as tmp:
        mask_fn = mask_function(producer, variant, runtime, Path(tmp), seed)
        if inp.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        done = []
        for f, t in tqdm(list(zip(files, targets)), desc="denoise", unit="file", disable=not progress or len(files) < 2):
            done.append({**denoise_file(producer, mask_fn, f, t, force=force, downmix=downmix, normalize=normalize), "variant": variant, "runtime": runtime})
    return done


# --- the command: `edgesmith denoise IN --out OUT` ----------------------------------------------------------

def _add_arguments(p) -> None:
    p.add_argument("input", help="a .wav file or a folder of .wav files")
    p.add_argument("--out", required=True, help="the output .wav (a folder for a folder)")
    p.add_argument("--variant", default="dense", choices=list(VARIANTS),
                   help="dense float, 90%% sparse float, or the w8a16 fixed-point network")
    p.add_argument("--runtime", choices=sorted({r for rts in RUNTIMES.values() for r in rts}, key=RUNTIME_ORDER.index),
                   help="dense/sparse: torch (default, whole clip) or onnxruntime (exported streaming step, frame by "
                        "frame); fixed: lrnn-ref (default, Numba) or lava (Lava's Loihi 2 simulator, slow)")
    p.add_argument("--downmix", action="store_true", help="average the channels and write mono (default: each "
                   "channel denoised on its own)")
    p.add_argument("--normalize", action="store_true", help="raise the output's peak to just under full scale "
                   "(default: the speech keeps the level it had in the input)")
    p.add_argument("--model", help="the audio producer (default: the only one registered)")
    p.add_argument("--model-option", dest="model_option", action="append", metavar="KEY=VALUE")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true")
    p.add_argument("--quiet", action="store_true")


def _run(args) -> int:
    from edgesmith.bench import api
    from edgesmith.bench.cli import parse_key_values

    done = api.denoise(args.input, args.out, model=args.model, variant=args.variant, runtime=args.runtime,
                       downmix=args.downmix, normalize=args.normalize, force=args.force, seed=args.seed,
                       model_options=parse_key_values(args.model_option, "--model-option"), progress=not args.quiet)
    for d in done:
        print(f"wrote {d['out']} ({d['channels']} channel(s), {d['samples']} samples at {d['rate']} Hz"
              + (", resampled for the model and back" if d["resampled"] else "")
              + f", {d['level_db']:+.1f} dB vs the input"
              + (f" (scaled {d['gain_db']:.1f} dB to stay under full scale)" if d["gain_db"] < 0 else "")
              + f"; {d['variant']} in {d['runtime']}, real-time factor {d['rtf']:.3f}, model alone {d['rtf_model']:.3f})")
    return 0


RUNTIME_ORDER = ["torch", "onnxruntime", "lrnn-ref", "lava"]
register_app(App("denoise", "enhance a WAV file or a folder of them with an audio model (any rate, channels and length)",
                 _add_arguments, _run))
