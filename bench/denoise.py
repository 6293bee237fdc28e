"""``edgesmith denoise IN --out OUT``: WAV in, WAV out, through an audio producer's model (the S5 denoiser).

IN is a WAV file or a folder of them. Every channel of every file is resampled to the model's rate
(polyphase filter), enhanced as one clip of any length, resampled back and written with the input's rate,
channel count, length and sample format (16/32-bit integer or float PCM). ``variant`` picks the model the
host-cpu plan builds: ``dense`` (the float model), ``sparse`` (pruned + quantization-aware fine-tuned, in
float) or ``fixed`` (its w8a16 fixed-point network in the bit-exact Numba model of what Lava runs). The
compressed variants are built by the plan's own passes (cached after the first run). Outputs are written
atomically and never replace a file without ``force``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from edgesmith.common import EdgesmithError, atomic_path, check_output

VARIANTS = {"dense": "dense", "sparse": "sparse", "fixed": "sparse-fixed"}


def _audio_producer(name: str | None, seed: int, options: dict):
    from edgesmith.models import get_producer, producer_names

    audio = [n for n in producer_names() if getattr(type(get_producer(n)), "audio_rate", None)]
    if name is None:
        if len(audio) != 1:
            raise EdgesmithError(f"several audio models are registered ({', '.join(audio)}).", "pick one with --model.")
        name = audio[0]
    if name not in audio:
        raise EdgesmithError(f"{name} is not an audio model.", f"use one of: {', '.join(audio) or 'none registered'}.")
    return get_producer(name, seed=seed, **options)


def _mask_fn(producer, variant: str, workdir: Path, seed: int):
    """The variant's mask function: built by the host-cpu plan's passes and run in its first runtime."""
    import torch

    from edgesmith.bench.deploy import source_artifact
    from edgesmith.compress import PassContext, run_passes
    from edgesmith.hardware import PlanOptions, get_target
    from edgesmith.runtimes import get_runtime

    if variant not in VARIANTS:
        raise EdgesmithError(f"unknown variant {variant!r}.", f"use one of: {', '.join(VARIANTS)}.")
    def torch_fn(module):
        def run(f):
            with torch.inference_mode():
                return module(torch.as_tensor(f, dtype=torch.float32)).numpy()
        return run

    if variant == "dense":
        return torch_fn(producer.module)
    plan = get_target("host-cpu").plan(producer, PlanOptions(variants=[VARIANTS[variant]]))
    (v,) = plan.variants
    ctx = PassContext(workdir=workdir, calibration=producer.calibration_data(32), seed=seed,
                      train_data=producer.training_data(), example_input=producer.example_inputs(1))
    art, _ = run_passes(source_artifact(producer), v.passes, ctx)
    if art.format == "lava":  # the fixed-point network: its Numba twin, on clips of any length
        from edgesmith.compress.lrnn.fixed import load_net

        net = load_net(art.path)
        return lambda f: _fixed_masks(net, f)
    if art.format == "torch":  # a causal recurrent model: any number of frames
        return torch_fn(art.module.eval())
    rt = get_runtime(v.runtimes[0], threads=1).load(art)
    return lambda f: rt.run(np.asarray(f, np.float32)).outputs


def _fixed_masks(net, feats: np.ndarray) -> np.ndarray:
    from edgesmith.compress.lrnn.fixed import quantize_features
    from edgesmith.runtimes.lrnn_ref import run_clips

    masks, _ = run_clips(net, quantize_features(net, np.asarray(feats, np.float32)))
    return masks * float(net["mask_scale"])


def _to_dtype(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "i":
        top = np.iinfo(dtype).max
        return np.clip(np.rint(y * top), -top - 1, top).astype(dtype)
    if dtype.kind == "u":
        return np.clip(np.rint(y * 128.0 + 128.0), 0, 255).astype(dtype)
    return y.astype(dtype)


def denoise_file(producer, mask_fn, src: Path, dst: Path, force: bool = False) -> dict:
    from scipy.io import wavfile

    from edgesmith.models.lrnn.audio import read_pcm, resample

    rate, x, dtype = read_pcm(src)
    model_rate = type(producer).audio_rate
    out = np.zeros_like(x)
    for c in range(x.shape[1]):
        y = producer.enhance_waveform(mask_fn, resample(x[:, c], rate, model_rate).astype(np.float32))
        back = resample(np.asarray(y, np.float64), model_rate, rate)
        out[:, c] = np.pad(back, (0, max(0, len(x) - len(back))))[: len(x)]
    data = _to_dtype(out, dtype)
    with atomic_path(dst, force=force) as tmp:
        wavfile.write(str(tmp), rate, data[:, 0] if data.shape[1] == 1 else data)
    return {"in": str(src), "out": str(dst), "rate": rate, "channels": int(x.shape[1]), "samples": int(len(x)),
            "resampled": rate != model_rate}


def denoise(inp, out, *, model: str | None = None, variant: str = "dense", force: bool = False, seed: int = 0,
            model_options: dict | None = None, progress: bool = True) -> list[dict]:
    """Denoise a WAV file or a folder of them into ``out`` (a file, or a folder for a folder)."""
    import tempfile

    inp, out = Path(inp), Path(out)
    if inp.is_dir():
        files = sorted(inp.glob("*.wav"))
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
    with tempfile.TemporaryDirectory(prefix="edgesmith-denoise-") as tmp:
        mask_fn = _mask_fn(producer, variant, Path(tmp), seed)
        if inp.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        done = []
        for f, t in tqdm(list(zip(files, targets)), desc="denoise", unit="file", disable=not progress or len(files) < 2):
            done.append(denoise_file(producer, mask_fn, f, t, force=force))
    return done
