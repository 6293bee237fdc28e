"""Bring your own model, on public architectures nobody in this project wrote.

    .venv/bin/python -m edgesmith.bench.studies.byom_architectures --out runs/byom [--force] [--quick]

Six models, built from their public definitions with seeded random weights (nothing is downloaded) and
exported to ONNX the way a user would (``torch.onnx.export``, dynamic batch): Hugging Face transformers'
ResNet, MobileNetV2, BERT (two int64 inputs: token ids and attention mask), Wav2Vec2 (raw audio) and ViT,
plus torch's own GRU cell with its hidden state as an input and an output. For each, calibration and
evaluation data are written as .npy/.npz files and ``edgesmith deploy FILE.onnx`` runs on host-cpu and
jetson-orin-nano with them (fidelity to fp32, the default without labels) and is tried on loihi2.
The table gives, per model and variant: output SQNR and max error vs fp32, p50 batch-1 latency from the
deploy (measured in a fresh process) next to a plain onnxruntime timing of the same file (default
session, same threads, this process), the Jetson estimate, whether every artifact passes onnx's full
checker, and loihi2's answer. TVM rows are left out here (``--no-tvm``) to keep the run short.
An official-format RWKV-7 checkpoint made here (World vocabulary, a trained-looking time_state, fp16)
goes through the same deploy with text data (standard-library source files), scored by perplexity.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from edgesmith.bench.studies.claim_io import claim_command, refuse_existing, write_claim
from edgesmith.common import EdgesmithError

SAMPLES = 64


def architectures(quick: bool):
    """(name, module returning one tensor, example args, input names, data maker (n, rng) -> dict)."""
    import torch
    from transformers import (BertConfig, BertForSequenceClassification, MobileNetV2Config,
                              MobileNetV2ForImageClassification, ResNetConfig, ResNetForImageClassification, ViTConfig,
                              ViTForImageClassification, Wav2Vec2Config, Wav2Vec2ForSequenceClassification)

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *a):
            return self.m(*a).logits

    class GRUStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell, self.head = torch.nn.GRUCell(40, 96), torch.nn.Linear(96, 8)

        def forward(self, x, h):
            h2 = self.cell(x, h)
            return self.head(h2), h2

    img = 32 if quick else 64
    torch.manual_seed(0)
    images = lambda n, rng: {"pixels": rng.normal(size=(n, 3, img, img)).astype(np.float32)}  # noqa: E731
    return [
        ("resnet", Logits(ResNetForImageClassification(ResNetConfig(
            embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1] if quick else [2, 2, 2, 2],
            num_labels=10))), (torch.randn(1, 3, img, img),), ["pixels"], images),
        ("mobilenetv2", Logits(MobileNetV2ForImageClassification(MobileNetV2Config(
            image_size=img, depth_multiplier=0.5, num_labels=10))), (torch.randn(1, 3, img, img),), ["pixels"], images),
        ("bert", Logits(BertForSequenceClassification(BertConfig(
            vocab_size=2000, hidden_size=128, num_hidden_layers=2 if quick else 4, num_attention_heads=4,
            intermediate_size=512, num_labels=3))), (torch.randint(0, 2000, (1, 32)), torch.ones(1, 32, dtype=torch.long)),
         ["input_ids", "attention_mask"],
         lambda n, rng: {"input_ids": rng.integers(0, 2000, (n, 32)).astype(np.int64),
                         "attention_mask": np.ones((n, 32), np.int64)}),
        ("wav2vec2", Logits(Wav2Vec2ForSequenceClassification(Wav2Vec2Config(
            hidden_size=96, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, conv_dim=(64, 64, 64),
            conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_feat_extract_layers=3, num_labels=4))),
         (torch.randn(1, 8000),), ["audio"], lambda n, rng: {"audio": rng.normal(size=(n, 8000)).astype(np.float32)}),
        ("vit", Logits(ViTForImageClassification(ViTConfig(
            image_size=img, patch_size=8, hidden_size=128, num_hidden_layers=2 if quick else 4, num_attention_heads=4,
            intermediate_size=256, num_labels=10))), (torch.randn(1, 3, img, img),), ["pixels"], images),
        ("gru-state", GRUStep(), (torch.randn(1, 40), torch.zeros(1, 96)), ["x", "h"],
         lambda n, rng: {"x": rng.normal(size=(n, 12, 40)).astype(np.float32)}),
    ]


def export(module, args, names, path: Path) -> None:
    import torch

    outs = ["y", "h_out"] if "h" in names else ["logits"]
    dyn = {n: {0: "batch"} for n in (*names, *outs)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), input_names=names, output_names=outs, dynamic_axes=dyn,
                          opset_version=17, dynamo=False)


def plain_onnxruntime_p50(path: Path, feed: dict, threads: int, reps: int) -> float:
    """p50 of ``session.run`` on a default onnxruntime session: the figure a user gets without edgesmith."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for _ in range(10):
        sess.run(None, feed)
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        sess.run(None, feed)
        times.append(time.perf_counter_ns() - t)
    return float(np.median(times)) * 1e-9


def checker_ok(folder: Path) -> dict:
    import onnx

    out = {}
    for f in sorted(folder.rglob("*.onnx")):
        try:
            onnx.checker.check_model(onnx.load(str(f)), full_check=True)
            out[str(f.relative_to(folder))] = True
        except Exception as e:  # record, do not hide
            out[str(f.relative_to(folder))] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return out


def run(out: Path, quick: bool, threads: int, reps: int) -> dict:
    import edgesmith

    work = out / "models"
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows, loihi = [], {}
    for name, module, args, names, data in architectures(quick):
        path = work / f"{name}.onnx"
        export(module, args, names, path)
        cal, ev = data(SAMPLES, rng), data(SAMPLES, rng)
        np.savez(work / f"{name}-calib.npz", **cal)
        np.savez(work / f"{name}-eval.npz", **ev)
        params = sum(p.numel() for p in module.parameters())
        for target in ("host-cpu", "jetson-orin-nano"):
            t0 = time.perf_counter()
            folder = edgesmith.deploy(str(path), target=target, out=out / "deploys" / f"{name}-{target}",
                                      tvm=False, reps=reps, warmup=10, threads=threads, batch_sizes=(1,),
                                      calibration_data=str(work / f"{name}-calib.npz"),
                                      eval_data=str(work / f"{name}-eval.npz"), force=True)
            wall = time.perf_counter() - t0
            report = json.loads((folder / "report.json").read_text())
            checks = checker_ok(folder / "artifacts") if (folder / "artifacts").exists() else {}
            feed = {k: v[:1] for k, v in cal.items()}
            if name == "gru-state":
                feed = {"x": cal["x"][:1, 0], "h": np.zeros((1, 96), np.float32)}
            plain = plain_onnxruntime_p50(path, feed, threads, reps) if target == "host-cpu" else None
            for r in report["results"]:
                ev_ = r["evaluation"]
                rows.append({"model": name, "params": int(params), "target": target, "variant": r["variant"],
                             "runtime": r["runtime_label"], "sqnr_db": ev_["value"],
                             "max_abs_error": ev_["extra"].get("max_abs_error"),
                             "p50_s": r["latency"]["1"]["p50"], "provenance": r["latency"]["1"]["provenance"],
                             "plain_onnxruntime_fp32_p50_s": plain, "size_bytes": r["size_bytes"],
                             "checker": all(v is True for v in checks.values()), "deploy_wall_s": wall,
                             "warnings": [w for w in report.get("warnings", []) if w.startswith(r["variant"])],
                             "kernels": next((p.get("extra", {}).get("kernels") for v in report["variants"]
                                              if v["name"] == r["variant"] for p in v["pass_reports"]
                                              if p.get("extra", {}).get("kernels")), None)})
            if checks and not all(v is True for v in checks.values()):
                rows[-1]["checker_detail"] = checks
        try:
            edgesmith.deploy(str(path), target="loihi2", out=out / "deploys" / f"{name}-loihi2", force=True,
                             calibration_data=str(work / f"{name}-calib.npz"))
            loihi[name] = "ran"
        except EdgesmithError as e:
            loihi[name] = e.problem
    rows += rwkv_rows(work, out, threads, reps, loihi)
    return {"rows": rows, "loihi2": loihi, "threads": threads, "reps": reps, "quick": quick}


def rwkv_rows(work: Path, out: Path, threads: int, reps: int, loihi: dict) -> list[dict]:
    """An official-layout RWKV-7 .pth (vocabulary 65536, time_state, fp16) with text calibration/evaluation."""
    import inspect

    import torch

    import edgesmith
    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model, official_state_dict

    torch.manual_seed(0)
    model = build_model(RWKVConfig(version=7, n_layer=2, n_embd=128, head_size=32, vocab_size=65536))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    sd = official_state_dict(model)
    sd.update({f"blocks.{i}.att.time_state": torch.randn(4, 32, 32) * 0.05 for i in range(2)})
    pth = work / "rwkv7-world.pth"
    torch.save({k: v.half() for k, v in sd.items()}, pth)
    text = "".join(Path(inspect.getsourcefile(m)).read_text() for m in (inspect, argparse, json))
    (work / "rwkv-calib.txt").write_text(text[: len(text) // 2])
    (work / "rwkv-eval.txt").write_text(text[len(text) // 2:])
    rows = []
    for target in ("host-cpu", "jetson-orin-nano"):
        folder = edgesmith.deploy(str(pth), target=target, out=out / "deploys" / f"rwkv7-world-{target}", reps=reps,
                                  warmup=10, threads=threads, force=True, options={"methods": ["rwkv-rtn", "rwkvquant"],
                                                                                    "bits": [4]},
                                  calibration_data=str(work / "rwkv-calib.txt"), eval_data=str(work / "rwkv-eval.txt"))
        report = json.loads((folder / "report.json").read_text())
        checks = checker_ok(folder / "artifacts")
        for r in report["results"]:
            rows.append({"model": "rwkv7-world (.pth)", "params": int(sum(v.numel() for v in sd.values())),
                         "target": target, "variant": r["variant"], "runtime": r["runtime_label"],
                         "perplexity": r["evaluation"]["value"], "sqnr_db": None, "max_abs_error": r["max_abs_diff"],
                         "p50_s": r["latency"]["1"]["p50"], "provenance": r["latency"]["1"]["provenance"],
                         "plain_onnxruntime_fp32_p50_s": None, "size_bytes": r["size_bytes"],
                         "checker": all(v is True for v in checks.values()), "tokens_per_s": r["speed"]["1"]["value"]})
    try:
        edgesmith.deploy(str(pth), target="loihi2", out=out / "deploys" / "rwkv-loihi2", force=True)
        loihi["rwkv7-world (.pth)"] = "ran"
    except EdgesmithError as e:
        loihi["rwkv7-world (.pth)"] = e.problem
    return rows


def markdown(res: dict) -> str:
    lines = ["| model | params | target | variant | output SQNR vs fp32 (dB) or perplexity | max abs error | p50 batch 1 | "
             "plain onnxruntime fp32 p50 | size | onnx checker |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        plain = "-" if r["plain_onnxruntime_fp32_p50_s"] is None else f"{r['plain_onnxruntime_fp32_p50_s'] * 1e6:.1f} us"
        score = f"{r['sqnr_db']:.1f}" if r["sqnr_db"] is not None else f"ppl {r['perplexity']:.1f}"
        lines.append(f"| {r['model']} | {r['params']:,} | {r['target']} | {r['variant']} | {score} | "
                     f"{r['max_abs_error']:.3g} | {r['p50_s'] * 1e6:.1f} us ({r['provenance']}) | {plain} | "
                     f"{r['size_bytes'] / 1024:.0f} KiB | {'pass' if r['checker'] else 'FAIL'} |")
    lines += ["", "loihi2:", ""] + [f"- {m}: {v}" for m, v in res["loihi2"].items()]
    return "\n".join(lines) + "\n"


def plot(res: dict, folder: Path) -> list[str]:
    """Output SQNR vs fp32 and host p50 per model and variant (bars), with the plain onnxruntime timing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    host = [r for r in res["rows"] if r["target"] == "host-cpu" and r["sqnr_db"] is not None]
    models = list(dict.fromkeys(r["model"] for r in host))
    variants = ["fp32", "int8", "int4"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.25
    for i, v in enumerate(variants):
        vals = {r["model"]: r for r in host if r["variant"] == v}
        xs = [k + (i - 1) * width for k, m in enumerate(models) if m in vals]
        axes[0].bar(xs, [min(vals[m]["sqnr_db"], 120) for m in models if m in vals], width, label=v)
        axes[1].bar(xs, [vals[m]["p50_s"] * 1e3 for m in models if m in vals], width, label=v)
    plain = {r["model"]: r["plain_onnxruntime_fp32_p50_s"] for r in host if r["variant"] == "fp32"}
    axes[1].scatter(range(len(models)), [plain[m] * 1e3 for m in models], marker="_", s=400, c="k", zorder=3,
                    label="plain onnxruntime fp32")
    for ax, label in zip(axes, ("output SQNR vs fp32 (dB, fp32 capped at 120)", "p50 batch 1 on host-cpu (ms, measured)")):
        ax.set_xticks(range(len(models)), models, rotation=20)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "byom.png", dpi=110)
    plt.close(fig)
    return ["byom.png"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgesmith.bench.studies.byom_architectures",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/byom"))
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smaller images and fewer layers")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=100)
    a = ap.parse_args(argv)
    refuse_existing(a.out, a.force)
    t0 = time.perf_counter()
    res = run(a.out.with_name(a.out.name + ".work"), a.quick, a.threads, a.reps)
    res["wall_seconds"] = time.perf_counter() - t0
    res["command"] = claim_command("edgesmith.bench.studies.byom_architectures", argv)
    print(write_claim(a.out, a.force, res, markdown, lambda folder: plot(res, folder)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
