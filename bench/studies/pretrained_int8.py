"""int8 on real pretrained models: edgesmith's int8 beside plain onnxruntime ``quantize_static``, paired in one run.

    python -m edgesmith.bench.studies.pretrained_int8 [--models cls det rec] [--rounds 5] [--out DIR] [--force]

For PP-OCR's classifier, detector and recognizer (``pretrained_fixtures``, as rapidocr-onnxruntime ships them) and the
data made here: the fp32 file, edgesmith's int8 (`edgesmith quantize --pass int8-qdq`, its default weight-layer
operator set), edgesmith's int8 with every operator type (`--option 'op_types=[]'`), and onnxruntime's
``quantize_static`` with its defaults (QDQ, every operator type, per-tensor weights, uint8 activations), all calibrated
on the same samples. Each file's score (accuracy against the labels for the classifier, output SQNR against fp32 for
the others) and its batch-1 p50 in onnxruntime (2 threads), timed round-robin in this one process, ``--rounds``
rounds of 50 calls each after 10 warm-up calls: the ratio to fp32 is the median over rounds of the per-round ratios,
so machine load that comes and goes hits every file alike. NNCF and OpenVINO are not here (see docs/results/models.md).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.bench import api
from edgesmith.bench.studies.claim_io import claim_command, refuse_existing, save_png, write_claim
from edgesmith.bench.studies.pretrained_fixtures import ppocr, text_lines, text_pages

MODULE = "edgesmith.bench.studies.pretrained_int8"
FORMS = ("fp32", "edgesmith int8", "edgesmith int8, every op type", "quantize_static (defaults)")


def _data(name: str):
    if name == "cls":
        x, y = text_lines(96, seed=0)
        return x[:32], x[32:], y[32:]
    if name == "rec":
        x, _ = text_lines(64, seed=0, width=320, flip=False)
        return x[:32], x[32:], None
    x = text_pages(16, seed=0)
    return x[:8], x[8:], None


def _plain_int8(src: Path, dst: Path, input_name: str, cal: np.ndarray) -> None:
    from onnxruntime.quantization import QuantFormat, quantize_static

    class Reader:
        def __init__(self):
            self.it = iter([{input_name: cal[i:i + 8]} for i in range(0, len(cal), 8)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ)


def _session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def study(name: str, work: Path, rounds: int) -> dict:
    import onnx

    model = ppocr(name)
    input_name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    cal, ev, labels = _data(name)
    np.save(work / f"{name}_cal.npy", cal)
    files = {"fp32": model}
    for form, options in (("edgesmith int8", None), ("edgesmith int8, every op type", {"op_types": []})):
        out = work / f"{name}_{len(files)}.onnx"
        api.quantize(str(model), "int8-qdq", out=out, calibration=cal, options=options, force=True)
        files[form] = out
    files["quantize_static (defaults)"] = work / f"{name}_plain.onnx"
    _plain_int8(model, files["quantize_static (defaults)"], input_name, cal)
    sessions = {form: _session(path) for form, path in files.items()}
    outputs = {form: s.run(None, {input_name: ev})[0] for form, s in sessions.items()}
    ref = outputs["fp32"]
    rows = {}
    for form, out in outputs.items():
        if labels is not None:
            score = float(np.mean(out.argmax(1) == labels))
        else:
            noise = float(np.sum((out - ref) ** 2))
            score = 200.0 if noise == 0 else float(10 * np.log10(np.sum(ref ** 2) / noise))
        rows[form] = {"score": round(score, 4), "size_kib": round(Path(files[form]).stat().st_size / 1024, 1)}
    x = ev[:1]
    for s in sessions.values():
        for _ in range(10):
            s.run(None, {input_name: x})
    per_round: dict[str, list[float]] = {form: [] for form in sessions}
    for _ in range(rounds):
        for form, s in sessions.items():
            ts = []
            for _ in range(50):
                t0 = time.perf_counter()
                s.run(None, {input_name: x})
                ts.append(time.perf_counter() - t0)
            per_round[form].append(float(np.median(ts)))
    for form in sessions:
        rows[form]["p50_us"] = round(float(np.median(per_round[form])) * 1e6, 1)
        rows[form]["over_fp32"] = round(float(np.median(np.array(per_round[form]) / np.array(per_round["fp32"]))), 3)
    return {"model": name, "file": model.name, "metric": "accuracy" if labels is not None else "SQNR vs fp32 (dB)",
            "rows": rows}


def markdown(result: dict) -> str:
    lines = ["# int8 on real pretrained models: edgesmith beside onnxruntime's quantize_static", "",
             f"{result['machine']}; {result['date']}; `{result['command']}`", "",
             "| model | metric | " + " | ".join(FORMS) + " |", "|---|---|" + "---|" * len(FORMS)]
    for m in result["models"]:
        cells = [f"{m['rows'][f]['score']:.4g}, {m['rows'][f]['over_fp32']:.2f}x ({m['rows'][f]['p50_us']:.0f} us)"
                 for f in FORMS]
        lines.append(f"| {m['model']} ({m['file']}) | {m['metric']} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: score, batch-1 p50 over fp32's (median of per-round ratios), and the p50 itself; "
              "onnxruntime, 2 threads, all files timed round-robin in one process (measured)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["cls", "det", "rec"], choices=["cls", "det", "rec"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("docs/results/pretrained-int8"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    refuse_existing(args.out, args.force)
    from edgesmith.hardware.host_cpu import cpu_identity

    cpu = cpu_identity()
    with tempfile.TemporaryDirectory(prefix="pretrained-int8.") as work:
        models = []
        for name in args.models:
            print(f"[pretrained_int8] {name} ...", flush=True)
            models.append(study(name, Path(work), args.rounds))
    result = {"machine": f"{cpu['model_name']}, {cpu['logical_cpus']} logical CPUs",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": claim_command(MODULE, argv),
              "models": models}

    def draw(folder: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3))
        width = 0.8 / (len(FORMS) - 1)
        for k, form in enumerate(FORMS[1:]):
            ax.bar([i + k * width for i in range(len(models))], [m["rows"][form]["over_fp32"] for m in models],
                   width, label=form)
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.axhline(0.6, color="k", linestyle="--", linewidth=0.8, label="goal 0.6x")
        ax.set_xticks([i + width for i in range(len(models))], [m["model"] for m in models])
        ax.set_ylabel("int8 p50 / fp32 p50, batch 1")
        ax.legend(fontsize=7)
        fig.tight_layout()
        save_png(fig, folder / "int8_over_fp32.png")
        return ["int8_over_fp32.png"]

    print(write_claim(args.out, args.force, result, markdown, draw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
