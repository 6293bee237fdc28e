"""Goal-driven deploy against NNCF's accuracy control: the same models, data, budget and split, in one run.

    python -m edgesmith.bench.studies.goal_vs_nncf [--models digits cls vad det rec] [--rounds 5] [--out DIR] [--force]

Needs the peer extra (``pip install 'edgesmith[peer]'``: OpenVINO, NNCF and onnx-neural-compressor, Intel Neural
Compressor's ONNX package). For each model (the digits MLP trained
here, exported to ONNX; PP-OCR's classifier, detector and recognizer and Silero VAD as their wheels ship them, with
data made here), one budget and one split of the evaluation data (``split_indices``, fraction 0.5, seed 0: the split
the deploy itself draws):

- edgesmith: ``edgesmith.deploy(model, "host-cpu", max_drop=0.01 | min_sqnr=20, runtimes=("openvino",))``, its
  wall time, the chosen (variant, runtime) and layers it restored, read from ``decision.json``;
- NNCF: ``nncf.quantize_with_accuracy_control`` on the ONNX file (ONNX backend, defaults), calibrated on the same
  samples, validated on the same validation part with the same metric (accuracy, or output SQNR against fp32 capped
  at 200 dB with ``max_drop`` = 200 - the floor), its wall time and the weight layers it left in fp32. Silero VAD
  is a step graph fed a sequence with its state, which NNCF's validation loop does not feed, so NNCF is not run on
  it (the table says so);
- Intel Neural Compressor: ``onnx_neural_compressor``'s ``autotune`` over its ``StaticQuantConfig`` defaults with
  ``tolerable_loss`` 0.01 (relative; for SQNR, the share of the capped 200 dB the floor allows), same data.

Then every file is scored on the held-out part and timed at batch 1 round-robin in one process
(``bench.measure.paired``, ``--rounds`` rounds): fp32 in onnxruntime and OpenVINO, edgesmith's choice in its runtime,
NNCF's file in both. Writes table.json, table.md and goal_vs_nncf.png into ``--out``.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.bench import api
from edgesmith.bench.measure.paired import time_paired
from edgesmith.bench.studies.claim_io import claim_command, peer_versions, refuse_existing, save_png, write_claim
from edgesmith.bench.studies.pretrained_fixtures import ppocr, silero_vad, text_lines, text_pages, vad_sequences
from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact
from edgesmith.models.base import split_indices
from edgesmith.runtimes import get_runtime

MODULE = "edgesmith.bench.studies.goal_vs_nncf"
MODELS = ("digits", "cls", "vad", "det", "rec")
SQNR_FLOOR = 20.0
CAP_DB = 200.0


def _sqnr(ref: np.ndarray, out: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - out) ** 2))
    return CAP_DB if noise == 0 else min(CAP_DB, float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / noise)))


def _case(name: str, folder: Path) -> dict:
    """The model file, its data files and deploy arguments, and the arrays NNCF and the scoring use."""
    if name == "digits":
        from edgesmith.models import get_producer

        p = get_producer("digits-mlp", seed=0).build()
        model = folder / "digits.onnx"
        api.export("digits-mlp", out=model, force=True)
        x, y = p.test_data()
        cal = p.calibration_data(128)
        metric = "accuracy"
    elif name == "vad":
        x, y = vad_sequences(16, 40, seed=0)
        np.savez(folder / "cal.npz", input=x[:6])
        np.savez(folder / "eval.npz", input=x[6:], labels=y[6:])
        return {"model": silero_vad(), "deploy": {"model_options": {"const": "sr:16000"}, "metric": "binary",
                                                  "calibration_data": folder / "cal.npz",
                                                  "eval_data": folder / "eval.npz", "max_drop": 0.01},
                "nncf": "not run: Silero VAD is a step graph fed a sequence with its recurrent state, which NNCF's "
                        "validation loop does not feed"}
    elif name == "cls":
        model = ppocr("cls")
        xs, ys = text_lines(160, seed=0)
        cal, x, y, metric = xs[:32], xs[32:], ys[32:], "accuracy"
    else:
        model = ppocr(name)
        xs = text_pages(16, seed=0) if name == "det" else text_lines(64, seed=0, width=320, flip=False)[0]
        k = 8 if name == "det" else 32
        cal, x, y, metric = xs[:k], xs[k:], None, "fidelity"
    np.save(folder / "cal.npy", cal)
    import onnx

    input_name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    np.savez(folder / "eval.npz", **{input_name: x, **({"labels": y} if y is not None else {})})
    budget = {"max_drop": 0.01, "metric": "accuracy"} if metric == "accuracy" else {"min_sqnr": SQNR_FLOOR}
    return {"model": model, "input": input_name, "cal": cal, "x": x, "y": y, "metric": metric,
            "deploy": {"calibration_data": folder / "cal.npy", "eval_data": folder / "eval.npz", **budget}}


def _score(case: dict, out: np.ndarray, ref: np.ndarray, idx) -> float:
    if case["metric"] == "accuracy":
        return float(np.mean(out[idx].argmax(-1) == case["y"][idx]))
    return _sqnr(ref[idx], out[idx])


def _run_all(rt, case: dict) -> np.ndarray:
    return np.concatenate([rt.run({case["input"]: case["x"][i:i + 8]}).outputs for i in range(0, len(case["x"]), 8)])


def _nncf(case: dict, path: Path, val_idx) -> dict:
    import nncf
    import onnx
    import onnxruntime as ort

    ref_sess = ort.InferenceSession(str(case["model"]), providers=["CPUExecutionProvider"])
    val_x = case["x"][val_idx]
    ref_val = np.concatenate([ref_sess.run(None, {case["input"]: val_x[i:i + 8]})[0] for i in range(0, len(val_x), 8)])

    def validate(model, data):
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        out = np.concatenate([sess.run(None, {case["input"]: xb})[0] for xb, _ in data])
        if case["metric"] == "accuracy":
            return float(np.mean(out.argmax(-1) == case["y"][val_idx]))
        return _sqnr(ref_val, out)

    cal = nncf.Dataset([case["cal"][i:i + 1] for i in range(len(case["cal"]))], lambda a: {case["input"]: a})
    val = nncf.Dataset([(val_x[i:i + 8], i) for i in range(0, len(val_x), 8)], lambda t: {case["input"]: t[0]})
    max_drop = 0.01 if case["metric"] == "accuracy" else CAP_DB - SQNR_FLOOR
    t0 = time.perf_counter()
    q = nncf.quantize_with_accuracy_control(onnx.load(str(case["model"])), cal, val, validation_fn=validate,
                                            max_drop=max_drop, subset_size=len(case["cal"]))
    wall = time.perf_counter() - t0
    onnx.save(q, str(path))
    fp32_layers = _fp32_weight_layers(q)
    return {"wall_s": round(wall, 1), "file": path, "fp32_layers": fp32_layers}


def _inc(case: dict, path: Path, val_idx) -> dict:
    """Intel Neural Compressor's accuracy-aware tuning for ONNX (onnx-neural-compressor's ``autotune`` over its
    ``StaticQuantConfig`` defaults, ``tolerable_loss`` 0.01), on the same calibration samples and validation part."""
    import onnx
    import onnxruntime as ort
    from onnx_neural_compressor import data_reader
    from onnx_neural_compressor.quantization import config, tuning

    val_x = case["x"][val_idx]
    ref_sess = ort.InferenceSession(str(case["model"]), providers=["CPUExecutionProvider"])
    ref_val = np.concatenate([ref_sess.run(None, {case["input"]: val_x[i:i + 8]})[0] for i in range(0, len(val_x), 8)])

    class Reader(data_reader.CalibrationDataReader):
        def __init__(self):
            self.rewind()

        def get_next(self):
            return next(self.it, None)

        def rewind(self):
            self.it = iter([{case["input"]: case["cal"][i:i + 1]} for i in range(len(case["cal"]))])

    def validate(model_path):
        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        out = np.concatenate([sess.run(None, {case["input"]: val_x[i:i + 8]})[0] for i in range(0, len(val_x), 8)])
        if case["metric"] == "accuracy":
            return float(np.mean(out.argmax(-1) == case["y"][val_idx]))
        return _sqnr(ref_val, out)

    loss = 0.01 if case["metric"] == "accuracy" else (CAP_DB - SQNR_FLOOR) / CAP_DB  # INC's loss is relative
    tune = tuning.TuningConfig(config_set=[config.StaticQuantConfig(calibration_data_reader=Reader())],
                               tolerable_loss=loss)
    t0 = time.perf_counter()
    try:
        q = tuning.autotune(str(case["model"]), tune, validate, calibration_data_reader=Reader())
    except SystemExit:  # autotune calls exit(0) when no trial meets the budget (onnx-neural-compressor 1.0)
        q = None
    wall = time.perf_counter() - t0
    if q is None:
        return {"wall_s": round(wall, 1), "error": "no quantized model met the budget (autotune returned none)"}
    onnx.save(q, str(path))
    return {"wall_s": round(wall, 1), "file": path, "fp32_layers": _fp32_weight_layers(q)}


def _fp32_weight_layers(model) -> int:
    """Conv/MatMul/Gemm nodes whose weight input is a float initializer (not fed by a DequantizeLinear)."""
    inits = {t.name for t in model.graph.initializer}
    produced = {o: n.op_type for n in model.graph.node for o in n.output}
    return sum(1 for n in model.graph.node if n.op_type in ("Conv", "MatMul", "Gemm") and len(n.input) > 1
               and (n.input[1] in inits or produced.get(n.input[1]) not in ("DequantizeLinear", None)))


def study(name: str, work: Path, rounds: int) -> dict:
    folder = work / name
    folder.mkdir()
    case = _case(name, folder)
    t0 = time.perf_counter()
    out = api.deploy(str(case["model"]), "host-cpu", out=folder / "deploy", runtimes=("openvino",), reps=50,
                     warmup=5, batch_sizes=[1], **case["deploy"])
    es_wall = time.perf_counter() - t0
    decision = json.loads((out / "decision.json").read_text())
    chosen = decision["chosen"]
    row = {"model": name, "metric": decision["metric"], "budget": decision["budget"],
           "fp32": {"held_out": decision["reference"]["held_out"]},
           "edgesmith": {"wall_s": round(es_wall, 1), "search_s": decision["search_s"], "variant": chosen["variant"],
                         "runtime": chosen["runtime"], "held_out": chosen["held_out"],
                         "validation": chosen["validation"], "restored": len(chosen["restored"]),
                         "verdict": chosen["verdict"]}}
    if "nncf" in case:  # no NNCF run: edgesmith's own figures only
        row["nncf"] = row["inc"] = {"error": case["nncf"].replace("NNCF's", "the peers'")}
        row["edgesmith"]["over_fp32"] = chosen.get("latency_over_baseline") or chosen.get("over_baseline")
        return row
    val_idx, held_idx = split_indices(len(case["x"]), 0.5, 0)
    try:
        nn = _nncf(case, folder / "nncf.onnx", val_idx)
        row["nncf"] = {"wall_s": nn["wall_s"], "fp32_layers": nn["fp32_layers"]}
    except Exception as e:  # NNCF's own failure on this model is a result of the comparison, not a crash of it
        row["nncf"] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"}
        nn = None
    try:
        inc = _inc(case, folder / "inc.onnx", val_idx)
    except Exception as e:  # the peer's own failure is a result of the comparison
        inc = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"}
    row["inc"] = {k: v for k, v in inc.items() if k != "file"}
    meta = json.loads((out / "chosen" / "chosen.json").read_text())
    files = {("fp32", "onnxruntime"): case["model"], ("fp32", "openvino"): case["model"],
             ("edgesmith", chosen["runtime"]): out / "chosen" / meta["files"][0]}
    if nn is not None:
        files[("nncf", "onnxruntime")] = nn["file"]
        files[("nncf", "openvino")] = nn["file"]
    if "file" in inc:
        files[("inc", "onnxruntime")] = inc["file"]
        files[("inc", "openvino")] = inc["file"]
    loaded = {}
    for key, path in files.items():
        try:
            loaded[key] = get_runtime(key[1], threads=2).load(Artifact("onnx", path=Path(path)))
        except EdgesmithError as e:
            row.setdefault("load_errors", {})[f"{key[0]} on {key[1]}"] = e.problem[:200]
    outputs = {key: _run_all(rt, case) for key, rt in loaded.items()}
    ref = outputs[("fp32", "onnxruntime")]
    for (who, rt_name), o in outputs.items():
        row.setdefault(who, {}).setdefault("held_out_by_runtime", {})[rt_name] = round(_score(case, o, ref, held_idx), 4)
    x1 = {case["input"]: case["x"][:1]}
    paired = time_paired({key: (lambda rt=rt: rt.run(x1)) for key, rt in loaded.items()}, rounds=rounds, calls=30)
    best_fp32 = min(paired.p50_s[k] for k in paired.p50_s if k[0] == "fp32")
    for (who, rt_name), p50 in paired.p50_s.items():
        row.setdefault(who, {}).setdefault("p50_us", {})[rt_name] = round(p50 * 1e6, 1)
        row[who].setdefault("over_best_fp32", {})[rt_name] = round(p50 / best_fp32, 3)
    row["timing"] = paired.method
    return row


def _cell(who: dict, key: str) -> str:
    v = who.get(key) or {}
    return ", ".join(f"{rt} {x}" for rt, x in v.items()) or "-"


def markdown(result: dict) -> str:
    lines = ["# Goal-driven deploy against NNCF's accuracy control", "",
             f"{result['machine']}; {result['date']}; {result['versions']}; `{result['command']}`", "",
             "| model | budget | fp32 held out | edgesmith choice | held out | over fastest fp32 | restored | edgesmith wall (search) | "
             "NNCF held out | NNCF over fastest fp32 | NNCF fp32 layers | NNCF wall | INC held out | INC over fastest fp32 | "
             "INC wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in result["models"]:
        e, n = m["edgesmith"], m["nncf"]
        lines.append(
            f"| {m['model']} | {m['budget']} | {m['fp32']['held_out']:.4g} | {e['variant']} on {e['runtime']} | "
            f"{_cell(e, 'held_out_by_runtime') if e.get('held_out_by_runtime') else e['held_out']} | "
            f"{_cell(e, 'over_best_fp32')} | {e['restored']} | {e['wall_s']} s ({e['search_s']} s) | "
            + (f"{n['error']} | - | - | - |" if "error" in n else
               f"{_cell(n, 'held_out_by_runtime')} | {_cell(n, 'over_best_fp32')} | {n['fp32_layers']} | {n['wall_s']} s |")
            + (lambda i: f" {i['error']} | - | {i.get('wall_s', '-')} s |" if "error" in i else
               f" {_cell(i, 'held_out_by_runtime')} | {_cell(i, 'over_best_fp32')} | {i['wall_s']} s |")(m.get("inc", {})))
    lines += ["", "Held-out figures on the half of the evaluation data neither tool's search saw; latency at batch 1, "
              "every file timed round-robin in one process (measured), as a ratio to the faster of fp32 in "
              "onnxruntime and OpenVINO. edgesmith's wall time is its whole deploy (every variant built, scored and "
              "timed, the search, the paired timing); NNCF's is quantize_with_accuracy_control alone."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("docs/results/goal"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    refuse_existing(args.out, args.force)
    peers = peer_versions(("onnxruntime", "openvino", "nncf", "onnx-neural-compressor"))
    versions = ", ".join(f"{p} {v}" for p, v in peers.items())
    from edgesmith.hardware.host_cpu import cpu_identity

    cpu = cpu_identity()
    with tempfile.TemporaryDirectory(prefix="goal-vs-nncf.") as work:
        models = []
        for name in args.models:
            print(f"[goal_vs_nncf] {name} ...", flush=True)
            models.append(study(name, Path(work), args.rounds))
    result = {"machine": f"{cpu['model_name']} (family {cpu['family']} model {cpu['model']}), {cpu['logical_cpus']} "
                         "logical CPUs", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": claim_command(MODULE, argv), "versions": versions, "models": models}

    def draw(folder: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.2))
        names = [m["model"] for m in models]
        for k, who in enumerate(("edgesmith", "nncf")):
            vals = [min((m[who].get("over_best_fp32") or {"-": 0.0}).values()) for m in models]
            ax.bar([i + 0.4 * k for i in range(len(names))], vals, 0.4, label=f"{who} (fastest runtime)")
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_xticks([i + 0.2 for i in range(len(names))], names)
        ax.set_ylabel("p50 / fastest fp32, batch 1 (0: not run)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        save_png(fig, folder / "goal_vs_nncf.png")
        return ["goal_vs_nncf.png"]

    print(write_claim(args.out, args.force, result, markdown, draw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
