"""`edgesmith denoise` as a user meets it: WAV files of several rates, channel counts and sample formats: a script.

    .venv/bin/python -m edgesmith.bench.studies.denoise_wavs --out runs/denoise-wavs [--force] [--lava]

Three files are made from the producer's held-out clips, each a run of clips whose noise type changes every
2 s (a harder stream than one clip): 6 s at 16 kHz int16 mono, 6 s at 22.05 kHz 24-bit stereo, 8 s at 8 kHz
float mono. Each (variant, runtime) pair denoises the folder through the public API (``edgesmith.denoise``,
what the CLI calls); the scores are SI-SNR against the clean twins at the file's own rate, the times are
MEASURED with perf_counter (``wall_s`` includes loading the models and the training-data cache). ``--lava``
adds the fixed network in Lava on the 8 kHz file, checked sample for sample against lrnn-ref (minutes).
Writes ``report.json`` and ``report.md`` into ``out`` atomically.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError, atomic_path, write_json

# name: (rate, the held-out clips of each channel, sample dtype, bits on disk)
FILES = {"a_16k_int16_mono.wav": (16000, [[0, 10, 20]], "int16", None),
         "b_22k_24bit_stereo.wav": (22050, [[31, 42, 53], [64, 75, 86]], "int32", 24),
         "c_8k_float_mono.wav": (8000, [[97, 108, 119, 130]], "float32", None)}
PAIRS = (("dense", "torch"), ("dense", "onnxruntime"), ("sparse", "torch"), ("fixed", "lrnn-ref"))


def make_files(folder: Path) -> dict[str, np.ndarray]:
    """The WAV files in ``folder``; returns their clean twins, (samples, channels) at each file's rate."""
    from edgesmith.bench.apps.denoise import _to_dtype, _write_wav
    from edgesmith.models import get_producer
    from edgesmith.models.lrnn.audio import resample

    test = get_producer("lrnn-denoiser").splits()["test"]
    clean = {}
    for name, (rate, chans, dtype, bits) in FILES.items():
        def run_of(ids, which):
            return np.stack([resample(np.concatenate([getattr(test, which)[i] for i in c]).astype(np.float64),
                                      16000, rate) for c in ids], 1)
        _write_wav(folder / name, rate, _to_dtype(run_of(chans, "noisy"), np.dtype(dtype)), bits)
        clean[name] = run_of(chans, "clean")
    return clean


def _si_snr(y: np.ndarray, ref: np.ndarray) -> float:
    """Mean over channels of the SI-SNR in dB."""
    from edgesmith.models.lrnn.data import si_snr

    return float(np.mean([si_snr(y[:, c], ref[:, c]) for c in range(ref.shape[1])]))


def run(lava: bool = False, log=print) -> dict:
    from edgesmith.bench.apps.denoise import denoise
    from edgesmith.models.lrnn.audio import read_pcm

    rows = []
    with tempfile.TemporaryDirectory(prefix="edgesmith-denoise-wavs-") as tmp:
        src = Path(tmp) / "in"
        src.mkdir()
        clean = make_files(src)
        noisy = {n: _si_snr(read_pcm(src / n)[1], clean[n]) for n in FILES}
        pairs = list(PAIRS) + ([("fixed", "lava")] if lava else [])
        for variant, runtime in pairs:
            inp = src
            if runtime == "lava":  # Lava simulates about 70 steps a second: the shortest file only
                inp = Path(tmp) / "lava-in"
                inp.mkdir()
                (inp / "c_8k_float_mono.wav").write_bytes((src / "c_8k_float_mono.wav").read_bytes())
            out = Path(tmp) / f"out-{variant}-{runtime}"
            t0 = time.perf_counter()
            done = denoise(inp, out, variant=variant, runtime=runtime, progress=False)
            wall = time.perf_counter() - t0
            for d in done:
                name = Path(d["out"]).name
                y = read_pcm(Path(d["out"]))[1]
                row = {"variant": variant, "runtime": runtime, "file": name, "noisy_si_snr_db": noisy[name],
                       "si_snr_db": _si_snr(y, clean[name]), "gain_db": d["gain_db"], "rtf": d["rtf"],
                       "rtf_model": d["rtf_model"], "wall_s_all_files": wall}
                if runtime == "lava":
                    ref = read_pcm(Path(tmp) / "out-fixed-lrnn-ref" / name)[1]
                    row["max_abs_diff_vs_lrnn_ref"] = float(np.abs(y - ref).max())
                rows.append(row)
                log(f"{variant}/{runtime} {name}: SI-SNR {noisy[name]:.2f} -> {row['si_snr_db']:.2f} dB, "
                    f"real-time factor {d['rtf']:.3f}")
    return {"rows": rows, "provenance": "measured: SI-SNR of the written files against clean twins; times with "
                                        "perf_counter on this machine, batch 1"}


def markdown(r: dict) -> str:
    lines = ["| variant | runtime | file | SI-SNR noisy -> out (dB) | level change (dB) | real-time factor "
             "(all / model) | wall for all files (s) |", "|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        extra = f" (max diff vs lrnn-ref {x['max_abs_diff_vs_lrnn_ref']:g})" if "max_abs_diff_vs_lrnn_ref" in x else ""
        lines.append(f"| {x['variant']} | {x['runtime']} | {x['file']} | {x['noisy_si_snr_db']:.2f} -> "
                     f"{x['si_snr_db']:.2f}{extra} | {x['gain_db']:.1f} | {x['rtf']:.3f} / {x['rtf_model']:.3f} | "
                     f"{x['wall_s_all_files']:.1f} |")
    return "\n".join(lines) + "\n\n" + r["provenance"] + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/denoise-wavs")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--lava", action="store_true", help="also the fixed network in Lava on the 8 kHz file (minutes)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists() and not a.force:
        raise EdgesmithError(f"{out} already exists.", "choose another --out folder or pass --force.")
    report = run(lava=a.lava)
    with atomic_path(out, force=a.force) as tmp:
        tmp.mkdir(parents=True)
        write_json(tmp / "report.json", report)
        (tmp / "report.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
