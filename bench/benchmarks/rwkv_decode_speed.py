"""Decode speed of the RWKV step in onnxruntime: fp32 vs weight-only 4-bit (MatMulNBits, accuracy_level 4).

    python -m edgesmith.bench.benchmarks.rwkv_decode_speed [--version 7] [--n-layer 4] [--n-embd 1024] \
        [--tokens 64] [--threads 1] [--out bench/results/rwkv_decode_speed.json]

The model has random weights (speed does not depend on their values) and is large enough that its
fp32 linear weights (hundreds of MB) cannot stay in the CPU cache, so each token streams every
weight from DRAM: batch-1 decoding is memory-bound. Block linears are RTN-quantized (4-bit codes,
group 64) and run as MatMulNBits; embedding lookup, LoRAs and head stay fp32 in both graphs. Reports
tokens/s (median over ``--rounds`` runs), the ratio, and the bytes-per-token bound: weight bytes
read per token divided by a measured copy bandwidth gives the most tokens/s the memory allows.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

from edgesmith.compress import Artifact
from edgesmith.compress.export_step import export_step_onnx, step_greedy_ort, torch_greedy
from edgesmith.compress.rwkvquant.rtn import rtn_quantize
from edgesmith.compress.rwkvquant.rwkvquant import linear_modules
from edgesmith.compress.rwkvquant.tensors import QuantLinear
from edgesmith.common import write_json
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model
from edgesmith.runtimes import get_runtime
from edgesmith.runtimes.stateful import step_feed, zero_state


class StepDecoder:
    """Greedy decoding of a step graph through the onnxruntime runtime, batch 1, state fed back."""

    def __init__(self, path: Path, spec: dict, threads: int):
        self.spec = spec
        self.rt = get_runtime("onnxruntime", threads=threads).load(Artifact("onnx", path=path, meta={"recurrent": spec}))

    def zero_state(self) -> dict:
        return zero_state(self.spec, 1)

    def step(self, token: int, state: dict):
        named = self.rt.run(step_feed(self.spec, np.array([token], np.int64), state)).named
        return named[self.spec["output"]][0], {i: named[o] for i, o in self.spec["state"]}


def random_model(version: int, n_layer: int, n_embd: int, head_size: int, seed: int = 0):
    torch.manual_seed(seed)
    m = build_model(RWKVConfig(version=version, n_layer=n_layer, n_embd=n_embd, head_size=head_size)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith(".weight") and p.ndim == 2:
                p.normal_(0, 1.0 / p.shape[1] ** 0.5)
    return m


def quantize_rtn(model, bits: int, group: int):
    import copy

    q = copy.deepcopy(model)
    for name, lin in linear_modules(q).items():
        parent, _, attr = name.rpartition(".")
        setattr(q.get_submodule(parent), attr,
                QuantLinear(rtn_quantize(lin.weight.detach(), bits, group), lin.in_features, lin.out_features))
    return q


def onnx_weight_bytes(path: Path) -> int:
    """Bytes of all initializers: what one decode step reads from memory (activations are tiny)."""
    return sum(t.ByteSize() for t in onnx.load(str(path), load_external_data=False).graph.initializer)


def copy_bandwidth(n_bytes: int = 512 * 2**20, reps: int = 5) -> float:
    """Bytes/s read by a large memcpy (read + write counted as reads' share: n_bytes per copy)."""
    a = np.ones(n_bytes // 4, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * n_bytes / best  # a copy reads and writes every byte


def tokens_per_s(dec: StepDecoder, n: int) -> float:
    state = dec.zero_state()
    logits, state = dec.step(0, state)
    for _ in range(3):  # warm-up
        logits, state = dec.step(int(np.argmax(logits)), state)
    t = time.perf_counter()
    for _ in range(n):
        logits, state = dec.step(int(np.argmax(logits)), state)
    return n / (time.perf_counter() - t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, default=7, choices=(6, 7))
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=1024)
    ap.add_argument("--head-size", type=int, default=64)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    m = random_model(a.version, a.n_layer, a.n_embd, a.head_size)
    q = quantize_rtn(m, a.bits, a.group)
    res = {"model": m.cfg.to_dict(), "threads": a.threads, "bits": a.bits, "group": a.group}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"fp32": Path(tmp) / "fp32.onnx", f"int{a.bits}": Path(tmp) / "q.onnx"}
        spec = export_step_onnx(m, paths["fp32"], accuracy_level=4)["recurrent"]
        counts = export_step_onnx(q, paths[f"int{a.bits}"], accuracy_level=4)
        res["matmulnbits_layers"] = counts["matmulnbits"]
        decs = {k: StepDecoder(p, spec, threads=a.threads) for k, p in paths.items()}
        prompt = [1, 2, 3]
        res["same_tokens_as_torch"] = {k: step_greedy_ort(paths[k], prompt, 16, a.threads) == torch_greedy(mod, prompt, 16)
                                       for k, mod in (("fp32", m), (f"int{a.bits}", q))}
        bw = copy_bandwidth()
        res["copy_bandwidth_GBps"] = bw / 1e9
        for k, p in paths.items():
            runs = [tokens_per_s(decs[k], a.tokens) for _ in range(a.rounds)]
            wb = onnx_weight_bytes(p)
            res[k] = {"tokens_per_s": statistics.median(runs), "runs": runs, "weight_bytes_per_token": wb,
                      "bound_tokens_per_s": bw / wb}
    res["speedup"] = res[f"int{a.bits}"]["tokens_per_s"] / res["fp32"]["tokens_per_s"]
    print("| graph | weight MB/token | tokens/s | bandwidth bound tokens/s |\n|---|---|---|---|")
    for k in paths:
        r = res[k]
        print(f"| {k} | {r['weight_bytes_per_token'] / 1e6:.1f} | {r['tokens_per_s']:.2f} | {r['bound_tokens_per_s']:.1f} |")
    print(f"speed-up {res['speedup']:.2f}x; copy bandwidth {res['copy_bandwidth_GBps']:.1f} GB/s; "
          f"same tokens as torch: {res['same_tokens_as_torch']}")
    if a.out:
        write_json(a.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
