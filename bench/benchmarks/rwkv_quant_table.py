"""Perplexity of the RWKV reference models: fp32 vs RTN, GPTQ, GPTVQ, RWKVQuant at ~3.3 and ~4.3 bpw.

    python -m edgesmith.bench.benchmarks.rwkv_quant_table [--models rwkv6-ref rwkv7-ref] [--bits 3 4] \
        [--vectors quantized fp] [--out-dir bench/results/rwkv_quant] [--threads 1]

Data: calibration is 64 windows of 128 bytes from the training split (``producer.calibration_data``);
RWKVQuant's threshold percentile is chosen on the validation split (``models.rwkv.data.load_validation``:
stdlib files past the training cap, never trained on, never evaluated); the evaluation split is only
ever scored. Settings are the pass defaults (SQ group 64 with fp16 scale and integer zero point; VQ
d=2 with codebooks sized to the same overhead). The token-shift multiplication vectors are treated
alike by every method: ``--vectors quantized`` (3-bit codebooks: plain k-means for the baselines,
the importance-weighted codebook for RWKVQuant) and/or ``--vectors fp`` (kept in high precision).
Rows: ``rwkvquant`` is the paper's default percentile (90), ``rwkvquant-val`` the percentile of
``PERCENTILES`` with the lowest validation perplexity. "ΔNLL vs GPTQ" is the mean per-window
difference of next-byte NLL to GPTQ at the same bits and vector treatment (negative = better) with
its paired standard error over the evaluation windows: differences within ~2 SE are noise. Writes ``table_*.md``, ``results_*.json``
(every per-layer decision and error, every candidate's validation perplexity) and ``ppl_vs_bpw_*.png``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from edgesmith.compress.rwkvquant import make_config, quantize_rwkv, save_quantized
from edgesmith.compress.rwkvquant.qcheckpoint import quantized_size_bytes
from edgesmith.models import get_producer
from edgesmith.common import atomic_path, write_json
from edgesmith.models.rwkv.data import load_validation, sequences
from edgesmith.models.rwkv.train import perplexity

METHODS = ("rtn", "gptq", "gptvq", "rwkvquant")
TUNED = "rwkvquant-val"  # RWKVQuant with its percentile chosen on the validation split
PERCENTILES = (50.0, 75.0, 90.0, 100.0)  # candidate thresholds (share of matrices below tau, per proxy)
VECTORS = {"quantized": True, "fp": False}


@torch.no_grad()
def window_nll(model, windows: np.ndarray, batch: int = 16) -> np.ndarray:
    """Mean next-byte NLL (nats) of each window: exp(mean) is the perplexity (windows have equal length),
    and paired per-window differences give a standard error for comparing two methods."""
    x = torch.from_numpy(np.ascontiguousarray(windows))
    out = []
    for i in range(0, len(x), batch):
        logits = model(x[i:i + batch, :-1])[0]
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), x[i:i + batch, 1:].reshape(-1),
                              reduction="none")
        out.append(nll.reshape(len(logits), -1).mean(1))
    return torch.cat(out).double().numpy()


def paired_vs(nll: np.ndarray, ref: np.ndarray) -> dict:
    """Mean per-window NLL difference to a reference method and its standard error (nats per byte)."""
    d = nll - ref
    return {"dnll": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")}


def validation_windows(prod, n: int) -> "torch.Tensor":
    """Windows of the validation split shaped like the producer's evaluation windows."""
    tokens, _ = load_validation()
    return sequences(tokens, prod.eval_seq_len + 1, n)


def run_model(name: str, bits_list, n_calibration: int, log=print, *, methods=METHODS,
              eval_sequences: int | None = None, save_dir: Path | None = None, vectors=(True,),
              percentiles=PERCENTILES) -> dict:
    """fp32 and every (vectors, bits, method) of ``name``: bpw, validation and held-out perplexity, size,
    per-layer decisions.

    ``methods`` may include ``TUNED``: RWKVQuant at each of ``percentiles``, scored on the validation
    split only, the best one then scored on the evaluation split. ``vectors``: which treatments of the
    multiplication vectors to run (True = codebook-quantized, False = fp), the same for every method.
    ``log`` is called once after fp32 and once after each row, so callers can drive a progress bar
    with it. ``eval_sequences`` scores fewer held-out (and validation) windows (quick runs); with
    ``save_dir`` every quantized model is saved there and its size is that file's size on disk.
    """
    prod = get_producer(name).build()
    if eval_sequences is not None:
        prod.eval_sequences = eval_sequences
    model = prod.module
    calib = prod.calibration_data(n_calibration)
    val = validation_windows(prod, prod.eval_sequences)
    forward = lambda m: (lambda x: m(torch.as_tensor(x))[0])  # noqa: E731
    val_ppl = lambda m: perplexity(forward(m), val)  # noqa: E731
    fp = prod.evaluate(forward(model))  # the producer's own scoring: fingerprint and byte count
    windows = prod.eval_windows()
    fp16_bytes = sum(v.numel() * 2 for v in model.state_dict().values())
    rows = [{"method": "fp32", "bits": 32, "bpw": 32.0, "ppl": fp.value, "val_ppl": val_ppl(model),
             "size_bytes": fp16_bytes * 2}]
    log(f"{name}: fp32 ppl {fp.value:.4f}")
    cache: dict = {}  # per-matrix GPTQ/GPTVQ results: same model and calibration for every row
    nlls: dict = {}
    for vec in vectors:
        for bits in bits_list:
            for method in methods:
                t0 = time.perf_counter()
                kw = dict(bits=bits, n_calibration=n_calibration, quantize_vectors=vec)
                candidates = {}
                if method == TUNED:
                    for pct in percentiles:
                        qm, r = quantize_rwkv(model, calib, make_config("rwkvquant", sq_percentile=pct, **kw),
                                              cache=cache)
                        candidates[pct] = (val_ppl(qm), qm, r)
                    best = min(candidates, key=lambda k: (candidates[k][0], -k))  # a tie goes to more SQ
                    _, q, rep = candidates[best]
                else:
                    q, rep = quantize_rwkv(model, calib, make_config(method, **kw), cache=cache)
                nll = window_nll(q, windows)
                ppl = float(np.exp(nll.mean()))
                row = {"method": method, "bits": bits, "vectors": "quantized" if vec else "fp",
                       "bpw": rep.bits_per_weight, "ppl": ppl,
                       "val_ppl": candidates[best][0] if candidates else val_ppl(q),
                       "n_vq": rep.extra["n_vq"], "n_sq": rep.extra["n_sq"], "size_bytes": quantized_size_bytes(q),
                       "vector_bpw": rep.extra["vector_bits_per_weight"], "decision": rep.extra["decision"],
                       "seconds": time.perf_counter() - t0, "layers": [layer.to_dict() for layer in rep.layers]}
                if candidates:
                    row["validation"] = [{"percentile": k, "val_ppl": v[0], "n_vq": v[2].extra["n_vq"]}
                                         for k, v in candidates.items()]
                if save_dir is not None:
                    tag = "" if vec else "-fpvec"
                    path = save_quantized(q, Path(save_dir) / f"{name}-{method}-{bits}b{tag}.pth")
                    row.update(size_bytes=path.stat().st_size, checkpoint=path.name)
                rows.append(row)
                nlls[(vec, bits, method)] = nll
                log(f"{name}: {method} {bits}b vectors {row['vectors']} -> {row['bpw']:.3f} bpw, "
                    f"val {row['val_ppl']:.4f}, ppl {ppl:.4f} ({row['seconds']:.0f}s)")
    for row in rows[1:]:  # paired comparison with GPTQ at the same bits and vector treatment
        vec = row["vectors"] == "quantized"
        ref = nlls.get((vec, row["bits"], "gptq"))
        if ref is not None and row["method"] != "gptq":
            row["vs_gptq"] = paired_vs(nlls[(vec, row["bits"], row["method"])], ref)
    return {"model": name, "config": model.cfg.to_dict(), "fp16_checkpoint_bytes": fp16_bytes,
            "eval_tokens": fp.n_samples, "val_tokens": int(val[:, 1:].size), "data": fp.extra.get("data"),
            "calibration_sequences": int(len(calib)), "rows": rows}


def markdown(results: list[dict]) -> str:
    lines = []
    for res in results:
        val = f", validation {res['val_tokens']} bytes" if "val_tokens" in res else ""
        lines += [f"### {res['model']} (eval {res['eval_tokens']} bytes{val}, data {res['data']})", "",
                  "| method | vectors | bits | bpw (linears) | val ppl | perplexity | Δ vs fp32 "
                  "| ΔNLL vs GPTQ ±SE (mnat/byte) | SQ/VQ layers | percentile | file size |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        fp = res["rows"][0]["ppl"]
        for r in res["rows"]:
            layers = "-" if r["method"] == "fp32" else f"{r['n_sq']}/{r['n_vq']}"
            pct = (r.get("decision") or {}).get("percentile", "-")
            vp = f"{r['val_ppl']:.4f}" if "val_ppl" in r else "-"
            vs = r.get("vs_gptq")
            paired = f"{1e3 * vs['dnll']:+.2f} ± {1e3 * vs['se']:.2f}" if vs else "-"
            lines.append(f"| {r['method']} | {r.get('vectors', '-')} | {r['bits']} | {r['bpw']:.3f} | {vp} "
                         f"| {r['ppl']:.4f} | {r['ppl'] - fp:+.4f} | {paired} | {layers} | {pct} "
                         f"| {r['size_bytes'] / 1e3:.0f} kB |")
        lines.append("")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results):
        fp = res["rows"][0]["ppl"]
        for i, method in enumerate((*METHODS, TUNED)):
            for vec, style in (("quantized", "-"), ("fp", "--")):
                pts = sorted((r["bpw"], r["ppl"]) for r in res["rows"]
                             if r["method"] == method and r.get("vectors", "quantized") == vec)
                if not pts:  # a run over a subset of the methods or vector settings
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ls=style, color=f"C{i}",
                        label=method if vec == "quantized" else f"{method} (fp vectors)")
        ax.axhline(fp, color="k", ls=":", label="fp32")
        ax.set_title(res["model"]), ax.set_xlabel("bits per weight (block linears)"), ax.set_ylabel("perplexity")
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["rwkv6-ref", "rwkv7-ref"])
    ap.add_argument("--bits", nargs="+", type=int, default=[3, 4])
    ap.add_argument("--vectors", nargs="+", choices=sorted(VECTORS), default=["quantized", "fp"])
    ap.add_argument("--n-calibration", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-dir", type=Path, default=Path("bench/results/rwkv_quant"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    results = [run_model(m, a.bits, a.n_calibration, methods=(*METHODS, TUNED),
                         vectors=tuple(VECTORS[v] for v in a.vectors)) for m in a.models]
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
