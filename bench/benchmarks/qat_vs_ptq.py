"""Post-training quantization vs brevitas quantization-aware training at W8A8 and W4A8: a script.

    .venv/bin/python -m edgesmith.bench.benchmarks.qat_vs_ptq --out runs/qat [--force] [--quick] [--epochs N]

Producers with labels (digits-wide, noise-cnn): ``edgesmith deploy NAME --target host-cpu --no-tvm --option
qat_epochs=N`` with the variants fp32, int8 (static QDQ PTQ), int4 (weight-only PTQ, MatMulNBits), qat-w8a8 and
qat-w4a8; accuracy on the held-out split, size on disk, p50 batch-1 latency in onnxruntime (measured, fresh
process) and the fine-tuning wall time from the pass report. Public architectures (Hugging Face ResNet and
ViT, small configs, seeded random weights, nothing downloaded) as torch modules: PTQ int8 QDQ and int4
weight-only (MatMul weights only: ResNet's convolutions stay fp32) vs qat-w8a8 / qat-w4a8 (distilled on 256
random images), scored by output SQNR against the fp32 model on 64 other images, with onnxruntime p50
batch-1 latency in this process. Writes ``table.json``, ``table.md`` and
``qat_vs_ptq.png`` into ``out``.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from edgesmith.bench.benchmarks.claim_io import refuse_existing, write_claim

VARIANTS = ("fp32", "int8", "int4", "qat-w8a8", "qat-w4a8")


def producer_rows(name: str, epochs: int, workdir: Path, reps: int) -> list[dict]:
    from edgesmith.bench.api import deploy

    out = deploy(name, "host-cpu", out=workdir / name, variants=VARIANTS, options={"qat_epochs": epochs},
                 tvm=False, reps=reps, warmup=10, batch_sizes=[1], force=True)
    report = json.loads((out / "report.json").read_text())
    fine_tune = {v["name"]: sum(p.get("extra", {}).get("fine_tune_s", 0.0) for p in v["pass_reports"])
                 for v in report["variants"]}
    rows = []
    for r in report["results"]:
        rows.append({"model": name, "variant": r["variant"], "runtime": r["runtime_label"],
                     "metric": r["evaluation"]["metric"], "value": r["evaluation"]["value"],
                     "size_bytes": r["size_bytes"], "bits_per_weight": r.get("bits_per_weight"),
                     "p50_s": r["latency"]["1"]["p50"], "latency": "measured (deploy, fresh process)",
                     "fine_tune_s": fine_tune.get(r["variant"], 0.0) or None})
    return rows


def _architectures(quick: bool):
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification, ViTConfig, ViTForImageClassification

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x).logits

    torch.manual_seed(0)
    resnet = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10)
    vit = ViTConfig(image_size=32 if quick else 64, patch_size=8, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128, num_labels=10)
    return {"hf-resnet": Logits(ResNetForImageClassification(resnet)).eval(),
            "hf-vit": Logits(ViTForImageClassification(vit)).eval()}


def _sqnr(out: np.ndarray, ref: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(np.sum((out - ref).astype(np.float64) ** 2), 1e-30)))


def _p50(rt, x: np.ndarray, reps: int) -> float:
    for _ in range(5):
        rt.run(x)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        rt.run(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def architecture_rows(epochs: int, quick: bool, workdir: Path, reps: int) -> list[dict]:
    import torch

    from edgesmith.compress import Artifact, PassContext, config_from_dict, run_passes
    from edgesmith.compress.export_onnx import ExportOnnxConfig
    from edgesmith.runtimes import get_runtime

    rng = np.random.default_rng(0)
    size = 32 if quick else 64
    train = rng.normal(size=(64 if quick else 256, 3, size, size)).astype(np.float32)
    test = rng.normal(size=(16 if quick else 64, 3, size, size)).astype(np.float32)
    rows = []
    for name, module in _architectures(quick).items():
        with torch.no_grad():
            ref = module(torch.from_numpy(test)).numpy()
        plans = {"fp32": [ExportOnnxConfig()], "int8": [ExportOnnxConfig(), config_from_dict({"kind": "int8-qdq"})],
                 "int4": [ExportOnnxConfig(), config_from_dict({"kind": "int4-weight-only"})],
                 "qat-w8a8": [config_from_dict({"kind": "qat-w8a8", "epochs": epochs})],
                 "qat-w4a8": [config_from_dict({"kind": "qat-w4a8", "epochs": epochs})]}
        for variant, passes in plans.items():
            folder = workdir / f"{name}-{variant}"
            folder.mkdir(parents=True, exist_ok=True)
            ctx = PassContext(workdir=folder, calibration=train[:128], example_input=train[:1], train_data=train,
                              progress=False)
            art, reports = run_passes(Artifact("torch", module=module), passes, ctx)
            rt = get_runtime("onnxruntime", threads=1).load(art)
            out = np.concatenate([rt.run(test[i : i + 8]).outputs for i in range(0, len(test), 8)])
            rows.append({"model": name, "variant": variant, "runtime": "onnxruntime", "metric": "output SQNR vs fp32 (dB)",
                         "value": _sqnr(out, ref), "size_bytes": art.size_bytes(),
                         "bits_per_weight": reports[-1].bits_per_weight, "p50_s": _p50(rt, test[:1], reps),
                         "latency": "measured (this process, 1 thread, median)",
                         "fine_tune_s": reports[-1].extra.get("fine_tune_s")})
    return rows


def markdown(rows: list[dict], epochs: int) -> str:
    lines = ["# PTQ vs brevitas QAT (host-cpu, onnxruntime)", "",
             f"QAT: {epochs} epoch(s) of fine-tuning (cross-entropy on the labels for the producers, distillation to "
             "the fp32 outputs for the architectures). Latency measured on this machine.", "",
             "| model | variant | metric | value | size on disk | bits/weight | p50 batch 1 | fine-tuning |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bits = "-" if r["bits_per_weight"] is None else f"{r['bits_per_weight']:.2f}"
        ft = "-" if not r["fine_tune_s"] else f"{r['fine_tune_s']:.1f} s"
        lines.append(f"| {r['model']} | {r['variant']} | {r['metric']} | {r['value']:.4f} | {r['size_bytes'] / 1024:.1f} KiB | "
                     f"{bits} | {r['p50_s'] * 1e6:.1f} us | {ft} |")
    lines += ["", "![metric per variant](qat_vs_ptq.png)", ""]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(3.2 * len(models), 3.2))
    for ax, m in zip(np.atleast_1d(axes), models):
        mine = [r for r in rows if r["model"] == m]
        ax.bar([r["variant"] for r in mine], [r["value"] for r in mine], color="tab:blue")
        ax.set_title(m, fontsize=9)
        ax.set_ylabel(mine[0]["metric"], fontsize=8)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
        lo = min(r["value"] for r in mine)
        if mine[0]["metric"] == "accuracy":
            ax.set_ylim(max(0.0, lo - 0.05), 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(epochs: int = 3, quick: bool = False, reps: int = 100, log=print) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgesmith-qat-") as tmp:
        names = ("noise-cnn",) if quick else ("digits-wide", "noise-cnn")
        for name in names:
            log(f"{name}: deploy with PTQ and QAT variants")
            rows += producer_rows(name, epochs, Path(tmp), reps)
        log("public architectures (Hugging Face ResNet, ViT)")
        rows += architecture_rows(epochs, quick, Path(tmp), reps)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/qat")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="noise-cnn and small images only")
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args(argv)
    out = Path(a.out)
    refuse_existing(out, a.force)
    rows = run(a.epochs, a.quick, reps=20 if a.quick else 100)
    md = write_claim(out, a.force, {"epochs": a.epochs, "rows": rows}, lambda r: markdown(r["rows"], r["epochs"]),
                     lambda folder: plot(rows, folder / "qat_vs_ptq.png") or ["qat_vs_ptq.png"])
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
