"""Perplexity of the RWKV reference models: fp32 vs RTN, GPTQ, GPTVQ, RWKVQuant at ~3.3 and ~4.3 bpw.

    python -m bench.benchmarks.rwkv_quant_table [--models rwkv6-ref rwkv7-ref] [--bits 3 4] \
        [--out-dir bench/results/rwkv_quant] [--threads 1]

Calibration: 64 windows of 128 bytes from the training split (``producer.calibration_data``); the
evaluation split is only ever scored, never used to choose anything. Settings are the pass
defaults (SQ group 64 with fp16 scale and integer zero point; VQ d=2 with codebooks sized to the
same overhead; RWKVQuant thresholds at the 90th percentile). Writes ``table.md``, ``results.json``
(with every per-layer decision and error) and ``ppl_vs_bpw.png`` into ``--out-dir``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from compress.rwkvquant import make_config, quantize_rwkv, save_quantized
from compress.rwkvquant.qcheckpoint import quantized_size_bytes
from models import get_producer
from models.common import atomic_path, write_json

METHODS = ("rtn", "gptq", "gptvq", "rwkvquant")


def run_model(name: str, bits_list, n_calibration: int, log=print, *, methods=METHODS,
              eval_sequences: int | None = None, save_dir: Path | None = None) -> dict:
    """fp32 and every (bits, method) of ``name``: bpw, held-out perplexity, size, per-layer decisions.

    ``log`` is called once after fp32 and once after each (bits, method), so callers can drive a
    progress bar with it. ``eval_sequences`` scores fewer held-out windows (quick runs); with
    ``save_dir`` every quantized model is saved there and its size is that file's size on disk.
    """
    prod = get_producer(name).build()
    if eval_sequences is not None:
        prod.eval_sequences = eval_sequences
    model = prod.module
    calib = prod.calibration_data(n_calibration)
    forward = lambda m: (lambda x: m(torch.as_tensor(x))[0])  # noqa: E731
    fp = prod.evaluate(forward(model))
    fp16_bytes = sum(v.numel() * 2 for v in model.state_dict().values())
    rows = [{"method": "fp32", "bits": 32, "bpw": 32.0, "ppl": fp.value, "size_bytes": fp16_bytes * 2}]
    log(f"{name}: fp32 ppl {fp.value:.4f}")
    for bits in bits_list:
        for method in methods:
            t0 = time.perf_counter()
            q, rep = quantize_rwkv(model, calib, make_config(method, bits=bits, n_calibration=n_calibration))
            ev = prod.evaluate(forward(q))
            row = {"method": method, "bits": bits, "bpw": rep.bits_per_weight, "ppl": ev.value,
                   "n_vq": rep.extra["n_vq"], "n_sq": rep.extra["n_sq"], "size_bytes": quantized_size_bytes(q),
                   "vector_bpw": rep.extra["vector_bits_per_weight"], "decision": rep.extra["decision"],
                   "seconds": time.perf_counter() - t0, "layers": [layer.to_dict() for layer in rep.layers]}
            if save_dir is not None:
                path = save_quantized(q, Path(save_dir) / f"{name}-{method}-{bits}b.pth")
                row.update(size_bytes=path.stat().st_size, checkpoint=path.name)
            rows.append(row)
            log(f"{name}: {method} {bits}b -> {row['bpw']:.3f} bpw, ppl {ev.value:.4f} ({row['seconds']:.0f}s)")
    return {"model": name, "config": model.cfg.to_dict(), "fp16_checkpoint_bytes": fp16_bytes,
            "eval_tokens": fp.n_samples, "data": fp.extra.get("data"), "calibration_sequences": int(len(calib)),
            "rows": rows}


def markdown(results: list[dict]) -> str:
    lines = []
    for res in results:
        lines += [f"### {res['model']} (eval {res['eval_tokens']} bytes, data {res['data']})", "",
                  "| method | bits | bpw (linears) | perplexity | Δ vs fp32 | SQ/VQ layers | file size |",
                  "|---|---|---|---|---|---|---|"]
        fp = res["rows"][0]["ppl"]
        for r in res["rows"]:
            layers = "-" if r["method"] == "fp32" else f"{r['n_sq']}/{r['n_vq']}"
            lines.append(f"| {r['method']} | {r['bits']} | {r['bpw']:.3f} | {r['ppl']:.4f} | {r['ppl'] - fp:+.4f} "
                         f"| {layers} | {r['size_bytes'] / 1e3:.0f} kB |")
        lines.append("")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results):
        fp = res["rows"][0]["ppl"]
        for method in METHODS:
            pts = sorted((r["bpw"], r["ppl"]) for r in res["rows"] if r["method"] == method)
            if not pts:  # a run over a subset of the methods
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method)
        ax.axhline(fp, color="k", ls="--", label="fp32")
        ax.set_title(res["model"]), ax.set_xlabel("bits per weight (block linears)"), ax.set_ylabel("perplexity")
        ax.legend()
    fig.tight_layout()
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["rwkv6-ref", "rwkv7-ref"])
    ap.add_argument("--bits", nargs="+", type=int, default=[3, 4])
    ap.add_argument("--n-calibration", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-dir", type=Path, default=Path("bench/results/rwkv_quant"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    results = [run_model(m, a.bits, a.n_calibration) for m in a.models]
    a.out_dir.mkdir(parents=True, exist_ok=True)
    tag = "_".join(a.models)
    write_json(a.out_dir / f"results_{tag}.json", results)
    md = markdown(results)
    with atomic_path(a.out_dir / f"table_{tag}.md", force=True) as tmp:
        tmp.write_text(md)
    plot(results, a.out_dir / f"ppl_vs_bpw_{tag}.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
