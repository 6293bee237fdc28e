"""Post-training quantization vs brevitas quantization-aware training at W8A8 and W4A8: a script.

    .venv/bin/python -m edgesmith.bench.studies.qat_vs_ptq --out runs/qat [--force] [--quick] [--epochs N] [--seeds K]

Models: the producers digits-mlp, digits-wide and noise-cnn (their own training data and held-out metric),
and two public architectures (Hugging Face ResNet and ViT, small configs) trained here for seconds on the
sklearn digits upsampled to 3 x 32 x 32 (data a package ships; nothing downloaded), scored by accuracy on
the held-out fifth. Variants, each through the project's passes and run in onnxruntime:
fp32 (ONNX export), int8 (static QDQ PTQ, onnxruntime's quantizer), int4 (weight-only PTQ, MatMulNBits,
float activations), ptq-w8a8 / ptq-w4a8 (brevitas with calibration only: the same quantizers as QAT, no
fine-tuning), ptq-w4a8-k1 (the same, with the one layer whose 4-bit weights move the outputs most kept at 8
bits: the pass's sensitivity table) and qat-w8a8 / qat-w4a8 (brevitas QAT, ``--epochs`` of cross-entropy on the labels, over
``--seeds`` fine-tuning seeds: mean and standard deviation). Every brevitas variant is exported in the
``ort-integer`` form (Linear layers as MatMulIntegerToFloat, convolutions QCDQ); with ``--tvm`` one more row,
qat-w8a8-qcdq: brevitas's portable QCDQ file compiled by TVM (untuned, seed 0). Size on disk, bits per
weight, p50 batch-1 latency (this process, 1 thread, median of ``reps`` runs) and the fine-tuning wall
time are measured. The goal check per model: QAT W4A8 within 0.5 points of fp32 where the 4-bit PTQ
variants lose more. Writes ``table.json``, ``table.md`` and ``qat_vs_ptq.png`` into ``out``.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from edgesmith.bench.studies.claim_io import refuse_existing, write_claim

VARIANTS = ("fp32", "int8", "int4", "ptq-w8a8", "ptq-w4a8", "ptq-w4a8-k1", "qat-w8a8", "qat-w4a8")


@dataclass
class Case:
    """A model with its data: ``score(predict)`` -> (metric name, value) on held-out data."""

    name: str
    module: object
    train: tuple[np.ndarray, np.ndarray]
    score: Callable
    source: str


def _producer_case(name: str, quick: bool) -> Case:
    from edgesmith.models import get_producer

    p = get_producer(name, tiny=True) if quick else get_producer(name)
    p.build()
    x, y = p.training_data()

    def score(predict):
        ev = p.evaluate(predict)
        return ev.metric.name, ev.value

    return Case(name, p.module, (np.asarray(x, np.float32), np.asarray(y)), score, f"producer {name}")


def _digit_images(seed: int = 0):
    """sklearn digits as 3 x 32 x 32 images (bilinear upsampling), standardized; stratified 80/20 split."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = torch.nn.functional.interpolate(torch.from_numpy((d.images / 16.0).astype(np.float32))[:, None], size=(32, 32),
                                        mode="bilinear", align_corners=False).repeat(1, 3, 1, 1).numpy()
    x = (x - x.mean()) / x.std()
    return train_test_split(x.astype(np.float32), d.target.astype(np.int64), test_size=0.2, random_state=seed,
                            stratify=d.target)


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
    vit = ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, num_labels=10)
    # epochs: ResNet converges in about 12 on the digits, the small ViT needs about 40
    return {"hf-resnet": (Logits(ResNetForImageClassification(resnet)), 2 if quick else 12),
            "hf-vit": (Logits(ViTForImageClassification(vit)), 2 if quick else 40)}


def train_classifier(module, x: np.ndarray, y: np.ndarray, epochs: int, lr: float = 2e-3, seed: int = 0):
    """Adam with a cosine schedule, batches of 64, cross-entropy; returns the module in eval mode."""
    import torch

    from edgesmith.common import seed_everything

    seed_everything(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    steps = epochs * ((len(xt) + 63) // 64)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
    gen = torch.Generator().manual_seed(seed)
    module.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 64):
            idx = perm[i : i + 64]
            loss = torch.nn.functional.cross_entropy(module(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return module.eval()


def _architecture_cases(quick: bool) -> list[Case]:
    xtr, xte, ytr, yte = _digit_images()
    if quick:
        xtr, ytr, xte, yte = xtr[:256], ytr[:256], xte[:64], yte[:64]
    cases = []
    for name, (module, epochs) in _architectures(quick).items():
        train_classifier(module, xtr, ytr, epochs)

        def score(predict, xte=xte, yte=yte):
            out = np.concatenate([np.asarray(predict(xte[i : i + 64])) for i in range(0, len(xte), 64)])
            return "accuracy", float(np.mean(out.argmax(1) == yte))

        cases.append(Case(name, module, (xtr, ytr), score, f"transformers {name[3:]} trained {epochs} epochs here"))
    return cases


def _plans(epochs: int) -> dict[str, list[dict]]:
    export = [{"kind": "export-onnx"}]
    return {"fp32": export, "int8": export + [{"kind": "int8-qdq"}], "int4": export + [{"kind": "int4-weight-only"}],
            "ptq-w8a8": [{"kind": "qat-w8a8", "epochs": 0, "form": "ort-integer"}],
            "ptq-w4a8": [{"kind": "qat-w4a8", "epochs": 0, "form": "ort-integer"}],
            "ptq-w4a8-k1": [{"kind": "qat-w4a8", "epochs": 0, "form": "ort-integer", "keep_8bit": 1}],
            "qat-w8a8": [{"kind": "qat-w8a8", "epochs": epochs, "form": "ort-integer"}],
            "qat-w4a8": [{"kind": "qat-w4a8", "epochs": epochs, "form": "ort-integer"}]}


def _p50(rt, x: np.ndarray, reps: int) -> float:
    for _ in range(5):
        rt.run(x)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        rt.run(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


TVM_VARIANT = "qat-w8a8-qcdq"  # brevitas's portable QCDQ file, compiled by TVM (seed 0 only: a compile each)


def case_rows(case: Case, epochs: int, seeds: int, workdir: Path, reps: int, tvm: bool = False,
              only: tuple[str, ...] | None = None) -> list[dict]:
    from edgesmith.compress import Artifact, PassContext, config_from_dict, run_passes
    from edgesmith.runtimes import get_runtime

    x, y = case.train
    rows = []
    plans = _plans(epochs)
    if tvm:
        plans[TVM_VARIANT] = [{"kind": "qat-w8a8", "epochs": epochs, "form": "qcdq"}]
    for variant, plan in plans.items():
        if only is not None and variant not in only:
            continue
        runs = seeds if variant.startswith("qat") and variant != TVM_VARIANT else 1
        runtime = "tvm" if variant == TVM_VARIANT else "onnxruntime"
        values, fine_tune, last = [], [], None
        for seed in range(runs):
            folder = workdir / f"{case.name}-{variant}-{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            passes = [config_from_dict({**p, "seed": seed} if p["kind"].startswith("qat") else p) for p in plan]
            ctx = PassContext(workdir=folder, calibration=x[:128], example_input=x[:1], train_data=(x, y), progress=False)
            art, reports = run_passes(Artifact("torch", module=case.module), passes, ctx)
            rt = get_runtime(runtime, threads=1).load(art)
            metric, value = case.score(lambda f: rt.run(np.asarray(f, np.float32)).outputs)
            values.append(value)
            fine_tune.append(reports[-1].extra.get("fine_tune_s") or 0.0)
            last = (art, reports, rt)
        art, reports, rt = last
        rows.append({"model": case.name, "source": case.source, "variant": variant, "runtime": runtime,
                     "metric": metric, "value": float(np.mean(values)), "values": values,
                     "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                     "size_bytes": art.size_bytes(), "bits_per_weight": reports[-1].bits_per_weight,
                     "p50_s": _p50(rt, x[:1], reps), "latency": "measured (this process, 1 thread, median)",
                     "fine_tune_s": float(np.mean(fine_tune)) if variant.startswith(("qat", "ptq")) else None,
                     "export": reports[-1].extra.get("export"),
                     "layer_bits": {k: v for k, v in reports[-1].config.get("layer_bits", {}).items()}
                     if variant.startswith(("qat", "ptq")) else None})
    return rows


def goal(rows: list[dict]) -> dict:
    """Per model: QAT W4A8 within 0.5 points of fp32, and do the 4-bit PTQ variants lose more?"""
    out = {}
    for m in dict.fromkeys(r["model"] for r in rows):
        v = {r["variant"]: r["value"] for r in rows if r["model"] == m}
        if next(r["metric"] for r in rows if r["model"] == m) != "accuracy":
            continue
        loss = {k: 100 * (v["fp32"] - v[k]) for k in ("int4", "ptq-w4a8", "qat-w4a8")}
        ptq_loses_more = max(loss["int4"], loss["ptq-w4a8"]) > loss["qat-w4a8"]
        out[m] = {"loss_points": loss, "qat_within_0.5": loss["qat-w4a8"] <= 0.5, "ptq_loses_more": ptq_loses_more,
                  "goal_case_met": loss["qat-w4a8"] <= 0.5 and ptq_loses_more and max(loss["int4"], loss["ptq-w4a8"]) > 0.5}
    return out


def markdown(rows: list[dict], epochs: int, seeds: int = 1) -> str:
    lines = ["# PTQ vs brevitas QAT (host-cpu, onnxruntime)", "",
             f"QAT: {epochs} epoch(s) of cross-entropy fine-tuning on the labels, mean ± sd over {seeds} seed(s); "
             "ptq-*: the same brevitas quantizers, calibration only. Brevitas variants run as the ort-integer form "
             "(Linear layers as onnxruntime's MatMulIntegerToFloat). Latency measured on this machine (1 thread).", "",
             "| model | variant | metric | value | size on disk | bits/weight | p50 batch 1 | fine-tuning |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bits = "-" if r["bits_per_weight"] is None else f"{r['bits_per_weight']:.2f}"
        ft = "-" if not r["fine_tune_s"] else f"{r['fine_tune_s']:.1f} s"
        value = f"{r['value']:.4f}" + (f" ± {r['sd']:.4f}" if r.get("sd") is not None else "")
        lines.append(f"| {r['model']} | {r['variant']}{' (TVM)' if r.get('runtime') == 'tvm' else ''} | {r['metric']} | {value} | {r['size_bytes'] / 1024:.1f} KiB | "
                     f"{bits} | {r['p50_s'] * 1e6:.1f} us | {ft} |")
    lines += ["", "Goal (QAT W4A8 within 0.5 points of fp32 where 4-bit PTQ loses more; accuracy loss in points):", ""]
    for m, g in goal(rows).items():
        lp = g["loss_points"]
        verdict = "met" if g["goal_case_met"] else ("PTQ int4 does not lose more than 0.5 here" if
                                                    max(lp["int4"], lp["ptq-w4a8"]) <= 0.5 else "not met")
        lines.append(f"- {m}: int4 {lp['int4']:+.2f}, ptq-w4a8 {lp['ptq-w4a8']:+.2f}, qat-w4a8 {lp['qat-w4a8']:+.2f}: {verdict}")
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
        ax.bar([r["variant"] for r in mine], [r["value"] for r in mine], yerr=[r.get("sd") or 0.0 for r in mine],
               color="tab:blue", capsize=2)
        ax.set_title(m, fontsize=9)
        ax.set_ylabel(mine[0]["metric"], fontsize=8)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
        lo = min(r["value"] for r in mine)
        if mine[0]["metric"] == "accuracy":
            ax.set_ylim(max(0.0, lo - 0.05), 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(epochs: int = 3, quick: bool = False, reps: int = 100, seeds: int = 3, tvm: bool = False, log=print) -> list[dict]:
    import torch

    # torch's OpenMP workers spin after each training step and steal the cores onnxruntime is timed on
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgesmith-qat-") as tmp:
        names = ("noise-cnn",) if quick else ("digits-mlp", "digits-wide", "noise-cnn")
        cases = [_producer_case(n, quick) for n in names]
        log("public architectures: training Hugging Face ResNet and ViT on the digits")
        cases += _architecture_cases(quick)
        for case in cases:
            log(f"{case.name}: {', '.join(VARIANTS)}")
            rows += case_rows(case, epochs, seeds, Path(tmp), reps, tvm=tvm)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/qat")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny noise-cnn and briefly trained architectures")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3, help="QAT fine-tuning seeds per cell")
    ap.add_argument("--tvm", action="store_true", help=f"also {TVM_VARIANT}: the QCDQ file compiled by TVM (untuned)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    refuse_existing(out, a.force)
    rows = run(a.epochs, a.quick, reps=20 if a.quick else 100, seeds=a.seeds, tvm=a.tvm)
    md = write_claim(out, a.force, {"epochs": a.epochs, "seeds": a.seeds, "rows": rows, "goal": goal(rows)},
                     lambda r: markdown(r["rows"], r["epochs"], r["seeds"]),
                     lambda folder: plot(rows, folder / "qat_vs_ptq.png") or ["qat_vs_ptq.png"])
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
