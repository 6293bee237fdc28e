"""Decode speed of the RWKV step in onnxruntime and in the C decoder against the memory bound: fp32, weight-only
4-bit, RWKVQuant.

    python -m edgesmith.bench.studies.rwkv_decode_speed [--version 7] [--n-layer 4] [--n-embd 1024] \
        [--tokens 64] [--threads 1 0] [--no-rwkvquant] [--runtimes onnxruntime rwkv-c] \
        [--models fp32 int int-sym rwkvquant] [--prefetch-f32 BYTES] [--out docs/results/rwkv_decode/decode.json]

The model has random weights (speed does not depend on their values) and is large enough that its
fp32 linear weights (hundreds of MB) cannot stay in the CPU cache, so each token streams every
weight from DRAM: batch-1 decoding is memory-bound. Graphs: fp32; every block linear RTN-quantized to
4-bit codes (group 64) and run as MatMulNBits (accuracy_level 4), with asymmetric grids ("int4", zero points
stored) and symmetric ones ("int4-sym", none stored: onnxruntime's kernel skips them); and the model quantized by RWKVQuant at
4 bits (its SQ layers as MatMulNBits, its VQ layers as a Gather of their codebooks that onnxruntime folds
to an fp32 weight at load, and again with them as exact 8-bit MatMulNBits, ``vq_form="int8"``). Embedding lookup, LoRAs and head stay fp32 in all. Each is exported twice: the
deploy graph (batch dimension dynamic, what ``edgesmith deploy`` writes) and the decode graph
(``export_step_onnx(batch=1)``: every shape static, so onnxruntime folds the shape arithmetic away). With
``rwkv-c`` among ``--runtimes``, each model is also written by ``export-rwkv-c`` and decoded by the
C decoder ("c": 4-bit codes as they are, on its AVX2 integer kernel; VQ layers as their exact 8-bit codes
on its 8-bit kernel, so the RWKVQuant model's "c" row is the counterpart of its ``int8vq`` graphs; fp32 layers
in fp32, with the software prefetch distance tuned on this machine (``tuned_prefetch_f32``) unless
``--prefetch-f32`` sets one; the output records which).

The bound: the bytes one token must move (every initializer onnxruntime keeps, except that an embedding
table is read one row; plus the recurrent state read and written) divided by the read bandwidth measured
at the same thread count right before each round (``ReadProbe``: the fastest of a torch sum of a 512 MiB
float32 array, onnxruntime's fp32 MatMul streaming 384 MiB of weights and the C decoder's own read loop). ``--threads 0`` means all cores.
Reports tokens/s (median of ``--rounds`` runs of ``--tokens`` greedy steps, after warm-up), the bound, the
median over rounds of their ratio (each round against its own probe: on a shared machine both move with the
load) and, conservatively, the ratio against the best bandwidth any probe of the run saw; everything MEASURED.
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

from edgesmith.compress import Artifact, PassContext, apply_pass
from edgesmith.compress.export_rwkv_c import ExportRWKVCConfig, why_unavailable
from edgesmith.compress.export_step import export_step_onnx, greedy_tokens, step_greedy_ort, torch_greedy
from edgesmith.compress.rwkvquant.rtn import rtn_quantize
from edgesmith.compress.rwkvquant.rwkvquant import linear_modules
from edgesmith.compress.rwkvquant.tensors import QuantLinear
from edgesmith.common import write_json
from edgesmith.hardware.host_cpu import last_level_cache_bytes
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


class CDecoder:
    """The C decoder (``export-rwkv-c``, runtime ``rwkv-c``) behind StepDecoder's interface: its state lives in
    the decoder, so ``zero_state`` resets it and the state passed around is None."""

    def __init__(self, path: Path, threads: int, prefetch_f32: int | None = None):
        from edgesmith.runtimes.rwkv_c_rt import RWKVCDecoder

        self.dec = RWKVCDecoder(path, threads=threads, prefetch_f32=prefetch_f32)

    def zero_state(self):
        self.dec.reset()

    def step(self, token: int, state):
        return self.dec.step(token), None


def c_kernel_in_cache(dec, name: str = "L0.fk", reps: int = 200) -> dict:
    """The C decoder's (an ``RWKVCDecoder``, at its thread count) own kernel on one of the model's matrices,
    repeated so it stays in the cache (the L3 for a 1024 x 4096 matrix): its rate when DRAM is not what limits it,
    call overhead included."""
    x = np.random.default_rng(0).standard_normal(dec.sizes_["C"]).astype(np.float32)
    for _ in range(20):
        dec.gemv(name, x)
    t = time.perf_counter()
    for _ in range(reps):
        dec.gemv(name, x)
    dt = (time.perf_counter() - t) / reps
    n = dec.sizes_["C"] * dec.sizes_["F"]
    return {"matrix": name, "us": dt * 1e6, "Gweights_per_s": n / dt / 1e9}


def random_model(version: int, n_layer: int, n_embd: int, head_size: int, seed: int = 0):
    torch.manual_seed(seed)
    m = build_model(RWKVConfig(version=version, n_layer=n_layer, n_embd=n_embd, head_size=head_size)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith(".weight") and p.ndim == 2:
                p.normal_(0, 1.0 / p.shape[1] ** 0.5)
    return m


def quantize_rtn(model, bits: int, group: int, symmetric: bool = False):
    import copy

    q = copy.deepcopy(model)
    for name, lin in linear_modules(q).items():
        parent, _, attr = name.rpartition(".")
        setattr(q.get_submodule(parent), attr,
                QuantLinear(rtn_quantize(lin.weight.detach(), bits, group, symmetric), lin.in_features,
                            lin.out_features))
    return q


def ort_session(model, threads: int = 1, **options):
    """An onnxruntime CPU session of ``model`` (a path, or a serialized graph) on ``threads`` threads; ``options``:
    further ``SessionOptions`` attributes."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    for k, v in options.items():
        setattr(so, k, v)
    return ort.InferenceSession(str(model) if isinstance(model, Path) else model, so, providers=["CPUExecutionProvider"])


def bytes_per_token(path: Path, spec: dict) -> dict:
    """Bytes one batch-1 step must move: the initializers of the graph as onnxruntime keeps it (constants
    folded), an embedding table (a Gather of an initializer by a computed index) as one row, plus the
    recurrent state read and written."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        folded = Path(tmp) / "folded.onnx"
        ort_session(path, graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                    optimized_model_filepath=str(folded))
        g = onnx.load(str(folded)).graph
    inits = {t.name: t for t in g.initializer}
    sizes = {n: t.ByteSize() for n, t in inits.items()}
    for node in g.node:
        if node.op_type == "Gather" and node.input[0] in inits and node.input[1] not in inits:
            t = inits[node.input[0]]
            if len(t.dims) == 2:  # a table looked up by the token: one row per step
                sizes[node.input[0]] = sizes[node.input[0]] // t.dims[0]
    state = sum(int(np.prod(shape)) * 4 for shape in spec["state_shapes"].values())
    weights = sum(sizes.values())
    return {"weights": weights, "state_read_and_written": 2 * state, "total": weights + 2 * state}


class ReadProbe:
    """The read bandwidth a token's weights can stream at, per thread count in ``threads``, measured three ways: a
    torch float32 sum of an ``n_bytes`` array, onnxruntime's own fp32 MatMul over a chain of ``links`` batch-1
    products with 1024 x 4096 weights (16 MiB each: the decode's access pattern), and, where the C decoder
    builds, its own read loop over the same array (AVX2 loads with the fp32 kernel's prefetch distance tuned on this
    machine). The bound
    uses the fastest: a bound some kernel beats is no bound. Called once per decode round, so the bound moves
    with a shared machine's load. One array and one chain serve every thread count (a session per count)."""

    def __init__(self, threads: list[int], n_bytes: int = 512 * 2**20, links: int = 24, reps: int = 3):
        from onnx import TensorProto, helper, numpy_helper

        self.reps = reps
        self.array = torch.ones(n_bytes // 4)
        rng = np.random.default_rng(0)
        nodes, inits, x = [], [], "x"
        for i in range(links):
            shape = (1024, 4096) if i % 2 == 0 else (4096, 1024)
            inits.append(numpy_helper.from_array(rng.standard_normal(shape, dtype=np.float32) * 0.01, f"w{i}"))
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"]))
            x = f"y{i}"
        g = helper.make_graph(nodes, "stream", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4096 if links % 2 else 1024])],
                              inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
        self.chain_bytes = sum(t.ByteSize() for t in inits)
        self.x = {"x": rng.standard_normal((1, 1024), dtype=np.float32)}
        self.sessions = {t: ort_session(model, t) for t in threads}
        for sess in self.sessions.values():
            sess.run(None, self.x)
        self.c_lib = None
        if not why_unavailable():
            from edgesmith.runtimes.rwkv_c_rt import library, tuned_prefetch_f32

            self.c_lib, self.c_prefetch = library(), tuned_prefetch_f32()["bytes"]

    def __call__(self, threads: int) -> dict:
        """Bytes/s of each stream on ``threads`` threads (best of ``reps``) and the faster of the two."""
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        t_sum = t_mm = t_c = float("inf")
        for _ in range(self.reps):
            t = time.perf_counter()
            self.array.sum().item()
            t_sum = min(t_sum, time.perf_counter() - t)
            t = time.perf_counter()
            self.sessions[threads].run(None, self.x)
            t_mm = min(t_mm, time.perf_counter() - t)
            if self.c_lib is not None:
                self.c_lib.rwkv_set_threads(threads)
                self.c_lib.rwkv_set_prefetch_f32(self.c_prefetch)
                t = time.perf_counter()
                self.c_lib.rwkv_read_probe(self.array.data_ptr(), self.array.numel())
                t_c = min(t_c, time.perf_counter() - t)
        torch.set_num_threads(before)
        out = {"torch_sum": self.array.numel() * 4 / t_sum, "ort_matmul": self.chain_bytes / t_mm}
        if self.c_lib is not None:
            out["c_read"] = self.array.numel() * 4 / t_c
        return {**out, "best": max(out.values())}


def tokens_per_s(dec: StepDecoder, n: int) -> float:
    state = dec.zero_state()
    logits, state = dec.step(0, state)
    for _ in range(3):  # warm-up
        logits, state = dec.step(int(np.argmax(logits)), state)
    t = time.perf_counter()
    for _ in range(n):
        logits, state = dec.step(int(np.argmax(logits)), state)
    return n / (time.perf_counter() - t)


def op_profile(path: Path, spec: dict, threads: int, steps: int = 32) -> dict:
    """Where a step's time goes: onnxruntime's own profiler, kernel microseconds per step by operator type, and
    the rate at which the weight-only kernels read their weights (bytes of their initializers / their time).
    Profiling adds a few microseconds per node, so the total is above an unprofiled step."""
    import collections
    import json

    with tempfile.TemporaryDirectory() as tmp:
        sess = ort_session(path, threads, enable_profiling=True, profile_file_prefix=str(Path(tmp) / "prof"))
        feed = step_feed(spec, np.array([1], np.int64), zero_state(spec, 1))
        for _ in range(steps):
            sess.run(None, feed)
        events = json.loads(Path(sess.end_profiling()).read_text())
    per_op = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_op[e["args"]["op_name"]] += e["dur"] / steps
    g = onnx.load(str(path), load_external_data=False).graph
    sizes = {t.name: t.ByteSize() for t in g.initializer}
    nbits_bytes = sum(sizes.get(i, 0) for n in g.node if n.op_type == "MatMulNBits" for i in n.input[1:])
    out = {"kernel_us_per_step": dict(sorted(per_op.items(), key=lambda kv: -kv[1])),
           "total_kernel_us": sum(per_op.values())}
    if per_op.get("MatMulNBits"):
        out["matmulnbits_GBps"] = nbits_bytes / (per_op["MatMulNBits"] * 1e-6) / 1e9
    return out


def matmulnbits_in_cache(threads: int, k: int = 1024, n: int = 4096, bits: int = 4, reps: int = 200,
                         accuracy_level: int = 4, zero_points: bool = False) -> dict:
    """One MatMulNBits (block 64; ``accuracy_level`` 4: int8 activations, 0: fp32; with or without stored zero
    points) on a weight small enough to stay in cache: the kernel's own rate when memory is not what limits it
    (weights per second, weight bytes per second)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    bs, nb = 64, k // 64
    inits = [numpy_helper.from_array(rng.integers(0, 256, (n, nb, bs * bits // 8), dtype=np.uint8), "B"),
             numpy_helper.from_array((rng.random(n * nb) * 0.01).astype(np.float32), "S")]
    if zero_points:
        inits.append(numpy_helper.from_array(rng.integers(0, 256, n * -(-nb * bits // 8), dtype=np.uint8), "Z"))
    node = helper.make_node("MatMulNBits", ["x"] + [t.name for t in inits], ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=bs, accuracy_level=accuracy_level)
    g = helper.make_graph([node], "kernel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    # IR 8 (opset 17's): the onnx package's default IR can be newer than an older onnxruntime reads
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    sess = ort_session(model.SerializeToString(), threads)
    x = rng.standard_normal((1, k)).astype(np.float32)
    for _ in range(20):
        sess.run(None, {"x": x})
    t = time.perf_counter()
    for _ in range(reps):
        sess.run(None, {"x": x})
    dt = (time.perf_counter() - t) / reps
    return {"shape": [n, k], "bits": bits, "accuracy_level": accuracy_level, "zero_points": zero_points, "us": dt * 1e6,
            "Gweights_per_s": k * n / dt / 1e9,
            "GBps": k * n * bits / 8 / dt / 1e9}


def quantize_rwkvquant(model, bits: int, seed: int = 0):
    """RWKVQuant (the paper's default settings) calibrated on byte windows of the stdlib training text."""
    from edgesmith.compress.rwkvquant import make_config, quantize_rwkv
    from edgesmith.models.rwkv.data import load_splits, sequences

    calib = sequences(load_splits().train, 128, 64, seed=seed)
    q, rep = quantize_rwkv(model, calib, make_config("rwkvquant", bits=bits))
    return q, {"n_sq": rep.extra["n_sq"], "n_vq": rep.extra["n_vq"], "bits_per_weight": rep.bits_per_weight}


def symmetric_ab(models: dict, threads: list[int], rounds: int, tokens: int) -> dict:
    """Tokens/s of two models' decode graphs, one round of each in turn (so both see the same load), and the
    median over rounds of the second's speed over the first's."""
    a, b = models
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        specs = {n: export_step_onnx(m, Path(tmp) / f"{n}.onnx", accuracy_level=4, batch=1)["recurrent"]
                 for n, m in models.items()}
        for t in threads:
            decs = {n: StepDecoder(Path(tmp) / f"{n}.onnx", spec, threads=t) for n, spec in specs.items()}
            runs = {n: [] for n in decs}
            for _ in range(rounds):
                for n, dec in decs.items():
                    runs[n].append(tokens_per_s(dec, tokens))
            ratios = [y / x for x, y in zip(runs[a], runs[b])]
            out[str(t)] = {"runs": runs, "median_tokens_per_s": {n: statistics.median(r) for n, r in runs.items()},
                           f"{b}_over_{a}": statistics.median(ratios), "rounds_faster": sum(r > 1 for r in ratios)}
            print(f"{t} thread(s): {a} {out[str(t)]['median_tokens_per_s'][a]:.1f} tok/s, {b} "
                  f"{out[str(t)]['median_tokens_per_s'][b]:.1f} tok/s; paired median {b}/{a} "
                  f"{out[str(t)][f'{b}_over_{a}']:.3f}, faster in {out[str(t)]['rounds_faster']} of {rounds} rounds")
    return out


def main(argv=None) -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, default=7, choices=(6, 7))
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=1024)
    ap.add_argument("--head-size", type=int, default=64)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 0], help="thread counts; 0 = all cores")
    ap.add_argument("--no-rwkvquant", action="store_true", help="skip the RWKVQuant graph (it takes a minute)")
    ap.add_argument("--models", nargs="+", choices=("fp32", "int", "int-sym", "rwkvquant"),
                    default=["fp32", "int", "int-sym", "rwkvquant"],
                    help="which models to decode: fp32, RTN int BITS asymmetric and symmetric, RWKVQuant")
    ap.add_argument("--prefetch-f32", type=int, default=None,
                    help="the C decoder's fp32 prefetch distance in bytes (0: none); default: the one tuned "
                         "on this machine, recorded in the output")
    ap.add_argument("--symmetric-ab", action="store_true",
                    help="only the int4 decode graphs, asymmetric vs symmetric, rounds interleaved and paired")
    ap.add_argument("--runtimes", nargs="+", default=["onnxruntime", "rwkv-c"], choices=("onnxruntime", "rwkv-c"),
                    help="onnxruntime: the deploy and decode step graphs; rwkv-c: the C decoder (export-rwkv-c)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    threads = sorted({t if t > 0 else os.cpu_count() for t in a.threads})
    torch.set_num_threads(max(threads))
    m = random_model(a.version, a.n_layer, a.n_embd, a.head_size)
    build = {"fp32": lambda: m, "int": lambda: quantize_rtn(m, a.bits, a.group),
             "int-sym": lambda: quantize_rtn(m, a.bits, a.group, symmetric=True)}
    models = {k.replace("int", f"int{a.bits}"): make() for k, make in build.items() if k in a.models}
    llc = last_level_cache_bytes()
    res = {"model": m.cfg.to_dict(), "bits": a.bits, "group": a.group, "cpu_count": os.cpu_count(),
           "last_level_cache_bytes": llc,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "graphs": {}}
    if a.symmetric_ab:
        res["symmetric_ab"] = symmetric_ab({k: models[k] for k in (f"int{a.bits}", f"int{a.bits}-sym")}, threads,
                                           a.rounds, a.tokens)
        if a.out:
            write_json(a.out, res)
        return 0
    quant = "rwkvquant" in a.models and not a.no_rwkvquant
    if quant:
        models[f"rwkvquant-{a.bits}bit"], res["rwkvquant"] = quantize_rwkvquant(m, a.bits)
    if "rwkv-c" in a.runtimes and not why_unavailable():
        from edgesmith.runtimes.rwkv_c_rt import tuned_prefetch_f32

        res["c_prefetch_f32"] = ({"bytes": a.prefetch_f32, "provenance": "set by --prefetch-f32"}
                                 if a.prefetch_f32 is not None else tuned_prefetch_f32())
        print(f"C decoder's fp32 prefetch distance: {res['c_prefetch_f32']['bytes']} bytes "
              f"({'tuned on this machine' if a.prefetch_f32 is None else 'set by --prefetch-f32'})")
    prompt = [1, 2, 3]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        probe = ReadProbe(threads)
        res["read_bandwidth_GBps"] = {str(t): [] for t in threads}  # every round's probe, best of the two streams
        variants = [(name, mod, "gather") for name, mod in models.items()]
        if quant:
            variants.append((f"rwkvquant-{a.bits}bit-int8vq", models[f"rwkvquant-{a.bits}bit"], "int8"))
        graphs = ([("deploy", None), ("decode", 1)] if "onnxruntime" in a.runtimes else []) + \
            ([("c", None)] if "rwkv-c" in a.runtimes else [])
        for name, mod, vq_form in variants:
            reference = torch_greedy(mod, prompt, 16)
            for graph, batch in graphs:
                if graph == "c":
                    if vq_form == "int8":  # the C decoder has one form of VQ layers (8-bit), measured once
                        continue
                    path = Path(tmp) / f"{name}.rwkvc.npz"
                    exp = apply_pass(Artifact("torch", module=mod), ExportRWKVCConfig(), PassContext(workdir=Path(tmp) / name))
                    exp.artifact.path.replace(path)
                    moved = {"total": exp.report.extra["bytes_per_token"]}
                    entry = {"graph": graph, "runtime": "rwkv-c", "bytes_per_token": moved,
                             "linears": {r.name: r.action for r in exp.report.layers},
                             "same_tokens_as_torch": greedy_tokens(CDecoder(path, threads=1).dec.step, prompt, 16) == reference}
                    make_decoder = lambda t, path=path: CDecoder(path, t, a.prefetch_f32)  # noqa: E731
                else:
                    path = Path(tmp) / f"{name}-{graph}.onnx"
                    out = export_step_onnx(mod, path, accuracy_level=4, batch=batch, vq_form=vq_form)
                    spec = out["recurrent"]
                    moved = bytes_per_token(path, spec)
                    entry = {"graph": graph, "runtime": "onnxruntime", "matmulnbits": out["matmulnbits"],
                             "vq_gather": out["vq_gather"], "vq_int8": out["vq_int8"], "nodes": out["nodes"],
                             "bytes_per_token": moved,
                             "same_tokens_as_torch": step_greedy_ort(path, prompt, 16) == reference}
                    make_decoder = lambda t, path=path, spec=spec: StepDecoder(path, spec, threads=t)  # noqa: E731
                for t in threads:
                    dec = make_decoder(t)
                    runs, bounds = [], []
                    for _ in range(a.rounds):  # the bound probed right before each round: both see the same load
                        bw = probe(t)
                        res["read_bandwidth_GBps"][str(t)].append(bw["best"] / 1e9)
                        bounds.append(bw["best"] / moved["total"])
                        runs.append(tokens_per_s(dec, a.tokens))
                    entry[str(t)] = {"tokens_per_s": statistics.median(runs), "runs": runs,
                                     "bound_tokens_per_s": statistics.median(bounds), "bounds": bounds,
                                     "times_bound": statistics.median(b / r for b, r in zip(bounds, runs)),
                                     "fits_in_last_level_cache": llc is not None and moved["total"] <= llc}
                    rows.append((name, graph, t, moved["total"], entry[str(t)]))
                    if name == f"int{a.bits}" and graph == "c":
                        entry[str(t)]["c_kernel_in_cache"] = c_kernel_in_cache(dec.dec)
                    if name in (f"int{a.bits}", f"int{a.bits}-sym") and graph == "decode":
                        zp = name == f"int{a.bits}"  # the asymmetric grid stores zero points, the symmetric none
                        entry[str(t)]["profile"] = op_profile(path, spec, t)
                        entry[str(t)]["profile"]["matmulnbits_in_cache"] = matmulnbits_in_cache(t, zero_points=zp)
                        # level 0 computes in fp32 (dequantized weights): the choice level 4 is measured against
                        entry[str(t)]["profile"]["matmulnbits_in_cache_fp32_compute"] = matmulnbits_in_cache(
                            t, accuracy_level=0, reps=50, zero_points=zp)
                res["graphs"][f"{name}/{graph}"] = entry
                if a.out:  # what is measured so far survives a later failure
                    write_json(a.out, res)
    # the per-round pairing can still catch a probe at a bad moment (a ratio under 1 says so); the conservative
    # ratio takes the best bandwidth any probe of the run saw at that thread count
    best = {t: max(v) for t, v in res["read_bandwidth_GBps"].items()}
    res["best_read_bandwidth_GBps"] = best
    for _, _, t, moved, r in rows:
        r["times_best_bound"] = best[str(t)] * 1e9 / moved / r["tokens_per_s"]
    if a.out:
        write_json(a.out, res)
    bw = {t: statistics.median(v) for t, v in res["read_bandwidth_GBps"].items()}
    print(f"read bandwidth, median (best) of the rounds: "
          f"{', '.join(f'{t} thread(s) {v:.1f} ({best[t]:.1f}) GB/s' for t, v in bw.items())}")
    if any(r["fits_in_last_level_cache"] for *_, r in rows):
        print(f"note: rows marked * read at most the last-level cache's {llc / 2**20:.0f} MiB per token, so they "
              "need not stream from DRAM; their ratio to the DRAM bound can fall below 1 (use a larger "
              "--n-layer/--n-embd for a memory-bound figure)")
    print("| model | graph | threads | MB/token | tokens/s | bound tokens/s | x bound (paired) | x best bound |\n"
          "|---|---|---|---|---|---|---|---|")
    for name, graph, t, moved, r in rows:
        mark = "*" if r["fits_in_last_level_cache"] else ""
        print(f"| {name}{mark} | {graph} | {t} | {moved / 1e6:.1f} | {r['tokens_per_s']:.1f} | "
              f"{r['bound_tokens_per_s']:.1f} | {r['times_bound']:.2f} | {r['times_best_bound']:.2f} |")
    for t in threads:
        c = res["graphs"].get(f"int{a.bits}/c", {}).get(str(t), {}).get("c_kernel_in_cache")
        if c:
            print(f"C decoder's 4-bit kernel, {t} thread(s), in cache ({c['matrix']}): {c['Gweights_per_s']:.1f} G weights/s")
    for name in (f"int{a.bits}", f"int{a.bits}-sym") if "onnxruntime" in a.runtimes else ():
        for t in threads if f"{name}/decode" in res["graphs"] else ():
            prof = res["graphs"][f"{name}/decode"][str(t)]["profile"]
            top = ", ".join(f"{op} {us:.0f}" for op, us in list(prof["kernel_us_per_step"].items())[:5])
            print(f"{name} decode graph, {t} thread(s), profiled kernel us per step: {top} "
                  f"(all {prof['total_kernel_us']:.0f}); MatMulNBits reads its weights at "
                  f"{prof.get('matmulnbits_GBps', 0):.1f} GB/s; alone on an in-cache 1024 x 4096 weight it does "
                  f"{prof['matmulnbits_in_cache']['Gweights_per_s']:.1f} G weights/s "
                  f"({prof['matmulnbits_in_cache_fp32_compute']['Gweights_per_s']:.1f} at accuracy_level 0)")
    print("same tokens as torch: " + ", ".join(f"{k} {v['same_tokens_as_torch']}" for k, v in res["graphs"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
