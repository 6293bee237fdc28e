"""int8 on real pretrained models: edgesmith's int8 beside onnxruntime's ``quantize_static`` and NNCF, each file run
in onnxruntime and in OpenVINO, paired in one run.

    python -m edgesmith.bench.studies.pretrained_int8 [--models cls det rec resnet18 mobilenetv2] [--rounds 5]
        [--out DIR] [--force]

Needs the peer extra (``pip install 'edgesmith[peer]'``: OpenVINO and NNCF). For PP-OCR's classifier, detector and
recognizer (``pretrained_fixtures``, as rapidocr-onnxruntime ships them) and the data made here, and for ResNet-18 and
MobileNetV2 at 224 x 224 (transformers' architectures with seeded random weights, exported here), five files, all
calibrated on the same samples: fp32; edgesmith's int8 as ``deploy`` builds it for onnxruntime (``edgesmith quantize
--pass int8-qdq``, its default weight-layer operator set) and as it builds it for OpenVINO (``--option
output_quantizers=false``, the variant ``int8-openvino`` of ``deploy --runtime openvino``); onnxruntime's
``quantize_static`` with its defaults; and NNCF's ``quantize`` with its defaults (ONNX backend, mixed preset). Each
file runs in edgesmith's ``onnxruntime`` and ``openvino`` runtimes (2 threads; OpenVINO in f32 inference precision):
its score in that runtime (accuracy against the labels for the classifier, output SQNR against the fp32 file in the
same runtime for the others), and its batch-1 p50, every (file, runtime) pair timed round-robin in this one process,
``--rounds`` rounds of 50 calls each after 10 warm-up calls. A ratio to fp32 is the median over rounds of the
per-round ratios to fp32 in the same runtime, so load that comes and goes hits every pair alike.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.bench import api
from edgesmith.bench.studies.claim_io import claim_command, peer_versions, refuse_existing, save_png, write_claim
from edgesmith.bench.studies.pretrained_fixtures import ppocr, text_lines, text_pages
from edgesmith.bench.studies.shapes_architectures import factory_text
from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact
from edgesmith.runtimes import get_runtime

MODULE = "edgesmith.bench.studies.pretrained_int8"
FORMS = ("fp32", "edgesmith int8 (onnxruntime form)", "edgesmith int8 (OpenVINO form)", "quantize_static (defaults)",
         "NNCF (defaults)")
RUNTIMES = ("onnxruntime", "openvino")


# standard ImageNet-size architectures from transformers, with seeded random weights (no pretrained weights are
# downloaded): timed like the pretrained files, scored by output SQNR against fp32 only
ARCHITECTURES = {
    "resnet18": "T.ResNetForImageClassification(T.ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], "
                "depths=[2, 2, 2, 2], layer_type='basic'))",
    "mobilenetv2": "T.MobileNetV2ForImageClassification(T.MobileNetV2Config())",
}


def _model_file(name: str, work: Path) -> Path:
    """The ONNX file of a fixture (as its wheel ships it) or of an architecture (exported here from its factory)."""
    if name not in ARCHITECTURES:
        return ppocr(name)
    factory = work / f"{name}_factory.py"
    factory.write_text(factory_text(f"Out({ARCHITECTURES[name]})"))  # the logits, as the shapes study exports them
    return api.export(f"{factory}:make", out=work / f"{name}.onnx", input_shapes={"": [3, 224, 224]}, force=True)


def _data(name: str):
    if name in ARCHITECTURES:  # photographs are not shipped: pages rendered at 224 x 224
        x = text_pages(24, seed=0, size=224)
        return x[:8], x[8:], None
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


def _nncf_int8(src: Path, dst: Path, input_name: str, cal: np.ndarray) -> None:
    import nncf
    import onnx

    data = nncf.Dataset([{input_name: cal[i:i + 1]} for i in range(len(cal))])
    onnx.save(nncf.quantize(onnx.load(str(src)), data, subset_size=len(cal)), str(dst))


def _score(out: np.ndarray, ref: np.ndarray, labels) -> float:
    if labels is not None:
        return float(np.mean(out.argmax(1) == labels))
    noise = float(np.sum((out.astype(np.float64) - ref) ** 2))
    return 200.0 if noise == 0 else float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / noise))


def study(name: str, work: Path, rounds: int) -> dict:
    import onnx

    model = _model_file(name, work)
    input_name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    cal, ev, labels = _data(name)
    files, quantize_s = {"fp32": model}, {"fp32": 0.0}
    makers = {
        "edgesmith int8 (onnxruntime form)": lambda out: api.quantize(str(model), "int8-qdq", out=out, calibration=cal,
                                                                      force=True),
        "edgesmith int8 (OpenVINO form)": lambda out: api.quantize(str(model), "int8-qdq", out=out, calibration=cal,
                                                                   options={"output_quantizers": False}, force=True),
        "quantize_static (defaults)": lambda out: _plain_int8(model, out, input_name, cal),
        "NNCF (defaults)": lambda out: _nncf_int8(model, out, input_name, cal),
    }
    for k, (form, make) in enumerate(makers.items()):
        files[form] = work / f"{name}_{k}.onnx"
        t0 = time.perf_counter()
        make(files[form])
        quantize_s[form] = time.perf_counter() - t0
    loaded, rows = {}, {}
    for form, path in files.items():
        for rt_name in RUNTIMES:
            cell = rows.setdefault(form, {"size_kib": round(Path(path).stat().st_size / 1024, 1),
                                          "quantize_s": round(quantize_s[form], 2)}).setdefault(rt_name, {})
            try:
                loaded[form, rt_name] = get_runtime(rt_name, threads=2).load(Artifact("onnx", path=Path(path)))
            except EdgesmithError as e:
                cell["error"] = e.problem.replace(f"{path}: ", "")[:200]
    outputs = {key: rt.run({input_name: ev}).outputs for key, rt in loaded.items()}
    for (form, rt_name), out in outputs.items():
        ref = outputs.get(("fp32", rt_name), outputs[("fp32", "onnxruntime")])
        rows[form][rt_name]["score"] = round(_score(out, ref, labels), 4)
    x = {input_name: ev[:1]}
    for rt in loaded.values():
        for _ in range(10):
            rt.run(x)
    per_round: dict = {key: [] for key in loaded}
    for _ in range(rounds):
        for key, rt in loaded.items():
            ts = []
            for _ in range(50):
                t0 = time.perf_counter()
                rt.run(x)
                ts.append(time.perf_counter() - t0)
            per_round[key].append(float(np.median(ts)))
    for (form, rt_name), ts in per_round.items():
        base = per_round.get(("fp32", rt_name))
        rows[form][rt_name]["p50_us"] = round(float(np.median(ts)) * 1e6, 1)
        if base:
            rows[form][rt_name]["over_fp32"] = round(float(np.median(np.array(ts) / np.array(base))), 3)
    best_fp32 = min(rows["fp32"][r]["p50_us"] for r in RUNTIMES if "p50_us" in rows["fp32"][r])
    for form in rows:
        timed = [(rows[form][r]["p50_us"], r) for r in RUNTIMES if "p50_us" in rows[form][r]]
        if timed:
            rows[form]["best"] = {"runtime": min(timed)[1], "over_best_fp32": round(min(timed)[0] / best_fp32, 3)}
    return {"model": name, "file": model.name, "metric": "accuracy" if labels is not None else "SQNR vs fp32 (dB)",
            "rows": rows}


def _cell(c: dict) -> str:
    if "error" in c:
        return f"fails to load: {c['error'][:90]}"
    return f"{c['score']:.4g}, {c['over_fp32']:.2f}x ({c['p50_us']:.0f} us)"


def markdown(result: dict) -> str:
    lines = ["# int8 on real pretrained models: edgesmith beside quantize_static and NNCF, in onnxruntime and OpenVINO",
             "", f"{result['machine']}; {result['date']}; onnxruntime {result['versions']['onnxruntime']}, "
             f"OpenVINO {result['versions']['openvino']}, NNCF {result['versions']['nncf']}; `{result['command']}`", "",
             "| model | file | metric | onnxruntime | OpenVINO | best over fastest fp32 | size | quantize time |",
             "|---|---|---|---|---|---|---|---|"]
    for m in result["models"]:
        for form in FORMS:
            r = m["rows"][form]
            best = r.get("best", {})
            label = f"{m['model']} (random weights)" if m["model"] in ARCHITECTURES else m["model"]
            lines.append(f"| {label} | {form} | {m['metric']} | {_cell(r['onnxruntime'])} | {_cell(r['openvino'])} "
                         f"| {best.get('over_best_fp32', float('nan')):.2f}x ({best.get('runtime', '-')}) "
                         f"| {r['size_kib']:.0f} KiB | {r['quantize_s']:.1f} s |")
    lines += ["", "Each runtime cell: score in that runtime, batch-1 p50 over the fp32 file's in the same runtime (median "
              "of per-round ratios) and the p50 itself; 2 threads, every (file, runtime) pair timed round-robin in one "
              "process (measured). 'best over fastest fp32': the file's faster runtime against the faster of the two "
              "fp32 rows. SQNR is against the fp32 file in the same runtime."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ["cls", "det", "rec", *ARCHITECTURES]
    ap.add_argument("--models", nargs="+", default=names, choices=names)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("docs/results/pretrained-int8"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    refuse_existing(args.out, args.force)
    versions = peer_versions(("onnxruntime", "openvino", "nncf"))
    from edgesmith.hardware.host_cpu import cpu_identity

    cpu = cpu_identity()
    with tempfile.TemporaryDirectory(prefix="pretrained-int8.") as work:
        models = []
        for name in args.models:
            print(f"[pretrained_int8] {name} ...", flush=True)
            models.append(study(name, Path(work), args.rounds))
    flags = set()
    try:
        flags = set(next((ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")), "").split())
    except OSError:
        pass
    result = {"machine": f"{cpu['model_name']} (family {cpu['family']} model {cpu['model']}), {cpu['logical_cpus']} logical "
                         "CPUs, " + " ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
                                             if f in flags),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": claim_command(MODULE, argv),
              "versions": versions, "models": models}

    def draw(folder: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
        width = 0.8 / (len(FORMS) - 1)
        for ax, rt_name in zip(axes, RUNTIMES):
            for k, form in enumerate(FORMS[1:]):
                ax.bar([i + k * width for i in range(len(models))],
                       [m["rows"][form][rt_name].get("over_fp32", 0.0) for m in models], width, label=form)
            ax.axhline(1.0, color="k", linewidth=0.8)
            ax.axhline(0.6, color="k", linestyle="--", linewidth=0.8, label="goal 0.6x")
            ax.set_xticks([i + 1.5 * width for i in range(len(models))], [m["model"] for m in models])
            ax.set_title(f"in {rt_name} (0: fails to load)", fontsize=9)
        axes[0].set_ylabel("int8 p50 / fp32 p50, batch 1")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        save_png(fig, folder / "int8_over_fp32.png")
        return ["int8_over_fp32.png"]

    print(write_claim(args.out, args.force, result, markdown, draw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
