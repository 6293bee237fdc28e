"""RWKV in the CLI: ``edgesmith quantize rwkv`` (one method -> a checkpoint + report) and
``edgesmith deploy rwkv --target host-cpu`` (the whole comparison -> a report folder).

The generic deploy pipeline (``bench.deploy``) fits classifier-like producers; a language model with
a recurrent state needs perplexity over held-out text and token-by-token decoding instead, so it has
its own report. The work is done by the existing pieces: ``compress.rwkvquant`` quantizes and saves,
``bench.benchmarks.rwkv_quant_table`` builds the perplexity table and its plot, and
``bench.benchmarks.rwkv_decode_speed`` measures decode speed (run in a fresh process, because timings
taken in a process that has just quantized a dozen models are noisy; see ``bench.latency``).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from edgesmith.bench.benchmarks.rwkv_quant_table import METHODS, markdown, plot, run_model
from edgesmith.bench.deploy import environment
from edgesmith.bench.latency import REPO_ROOT
from edgesmith.common import EdgesmithError, atomic_path, write_json

REF_MODELS = ("rwkv6-ref", "rwkv7-ref")
BITS = (3, 4)
TARGET = "host-cpu"
DECODE_SCRIPT = "edgesmith.bench.benchmarks.rwkv_decode_speed"


# --- quantize ---------------------------------------------------------------------------------------


def parse_method(method: str | None) -> str:
    method = "rwkvquant" if method is None else str(method)
    if method not in METHODS:
        raise EdgesmithError(f"--method {method!r} is not an RWKV quantization method.",
                             f"use one of {', '.join(METHODS)}.")
    return method


def parse_bits(bits) -> int:
    text = "3" if bits is None else str(bits).strip()
    if text not in {str(b) for b in BITS}:
        raise EdgesmithError(f"--bits {text!r} is not supported for RWKV.",
                             f"use --bits {' or --bits '.join(map(str, BITS))} (about 3.3 or 4.3 bits per weight).")
    return int(text)


def load_rwkv_source(spec: str | None, seed: int = 0):
    """(model, data producer, label) for a producer name or an official-layout ``.pth`` path.

    The data producer supplies calibration windows (training split) and the held-out evaluation; for a
    user's checkpoint it is the reference producer of the same RWKV version, never built.
    """
    from edgesmith.models import get_producer
    from edgesmith.models.rwkv.checkpoint import load_rwkv
    from edgesmith.models.rwkv.producer import RWKV6Reference, RWKV7Reference

    spec = spec or "rwkv7-ref"
    if spec in REF_MODELS:
        prod = get_producer(spec, seed=seed).build()
        return prod.module, prod, spec
    path = Path(spec)
    if path.suffix != ".pth" and not path.exists():
        raise EdgesmithError(f"--rwkv-model {spec!r} is neither a reference model nor a file.",
                             f"use {' or '.join(REF_MODELS)}, or the path of an official RWKV-6/7 .pth checkpoint.")
    model = load_rwkv(path)  # a missing, corrupt or foreign file is an EdgesmithError naming the problem
    data = (RWKV6Reference if model.cfg.version == 6 else RWKV7Reference)(seed=seed)
    return model, data, str(path)


def _perplexity(data, model) -> dict:
    import torch

    ev = data.evaluate(lambda x: model(torch.as_tensor(x))[0])
    return {"perplexity": ev.value, "eval_bytes": ev.n_samples, "data": ev.extra.get("data")}


def quantize_rwkv_cli(model_spec: str | None, *, method: str | None, bits, out: str | os.PathLike,
                      group_size: int | None = None, sq_percentile: float | None = None, n_calibration: int = 64,
                      seed: int = 0, force: bool = False, progress: bool = True, threads: int = 1) -> dict:
    """Quantize one RWKV model with one method; write the checkpoint and ``<out>.report.json``.

    The report holds the per-layer decisions and errors, bits per weight, the file's size and the
    held-out perplexity of fp32 vs the checkpoint as reloaded from disk (so the figure is the file's).
    ``threads`` defaults to 1: on a shared machine more torch threads than free cores made the
    calibration pass ten times slower. Returns the report.
    """
    import torch

    method, bits = parse_method(method), parse_bits(bits)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise EdgesmithError(f"--threads {threads!r} is not a positive whole number.", "pass e.g. --threads 1.")
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _quantize(model_spec, method, bits, Path(out), group_size, sq_percentile, n_calibration, seed, force,
                         progress, threads)
    finally:
        torch.set_num_threads(prev)


def _quantize(model_spec, method, bits, out: Path, group_size, sq_percentile, n_calibration, seed, force, progress,
              threads) -> dict:
    from edgesmith.compress.rwkvquant import load_quantized, make_config, quantize_rwkv, save_quantized

    report_path = out.with_suffix(out.suffix + ".report.json")
    for p in (out, report_path):
        if p.exists() and not force:
            raise EdgesmithError(f"{p} already exists.", "choose another --out or pass --force.")
    kw = {"bits": bits, "n_calibration": n_calibration, "seed": seed}
    if group_size is not None:
        kw["group_size"] = group_size
    if sq_percentile is not None:
        kw["sq_percentile"] = sq_percentile
    config = make_config(method, **kw)  # validates every option (EdgesmithError naming the field)
    model, data, label = load_rwkv_source(model_spec, seed)
    say = tqdm.write if progress else (lambda msg: None)
    t0 = time.perf_counter()
    q, rep = quantize_rwkv(model, data.calibration_data(n_calibration), config, log=say)
    seconds = time.perf_counter() - t0
    notes = list(rep.notes)
    with atomic_path(out, force=force) as tmp:  # the file appears only once it has reloaded and been scored
        save_quantized(q, tmp)
        size = tmp.stat().st_size
        if model.cfg.vocab_size == 256:
            ppl = {"fp32": _perplexity(data, model), "quantized": _perplexity(data, load_quantized(tmp)),
                   "quantized_source": "the checkpoint reloaded from --out"}
        else:
            ppl = None
            notes.append(f"perplexity not measured: the model's vocabulary has {model.cfg.vocab_size} tokens but the "
                         "held-out text is byte-tokenized; calibration fed byte values as token ids")
    report = {"input": label, "output": str(out), "method": method, "bits": bits, "config": config.to_dict(),
              "model_config": model.cfg.to_dict(), "bits_per_weight": rep.bits_per_weight,
              "vector_bits_per_weight": rep.extra["vector_bits_per_weight"], "n_sq": rep.extra["n_sq"],
              "n_vq": rep.extra["n_vq"], "decision": rep.extra["decision"], "size_bytes": size,
              "fp32_tensor_bytes": sum(v.numel() * 4 for v in model.state_dict().values()),
              "calibration": {"sequences": rep.extra["calibration_sequences"],
                              "tokens": rep.extra["calibration_tokens"], "split": "training (stdlib text bytes)"},
              "perplexity": ppl, "quantize_seconds": seconds, "threads": threads,
              "layers": [layer.to_dict() for layer in rep.layers], "notes": notes}
    write_json(report_path, report, force=force)
    print(f"wrote {out} ({size:,} bytes, {rep.bits_per_weight:.3f} bits/weight in the block linears, "
          f"{report['n_sq']} SQ / {report['n_vq']} VQ); report {report_path}")
    if ppl:
        print(f"perplexity ({ppl['fp32']['eval_bytes']} held-out bytes): fp32 {ppl['fp32']['perplexity']:.4f}, "
              f"{method} {bits}-bit {ppl['quantized']['perplexity']:.4f}")
    return report


# --- deploy -----------------------------------------------------------------------------------------


@dataclass
class RWKVDeployOptions:
    """What ``deploy rwkv`` runs. Defaults are the full comparison; ``quick()`` is a smoke-test preset.

    ``eval_sequences``: held-out windows of 256 bytes scored per model. ``decode_*``: the random-weight
    model timed in onnxruntime (the default's fp32 linears are ~200 MB, far beyond any CPU cache).
    ``threads``: torch threads while quantizing and onnxruntime threads while decoding.
    """

    out: Path
    target: str = TARGET
    force: bool = False
    models: tuple[str, ...] = REF_MODELS
    bits: tuple[int, ...] = BITS
    methods: tuple[str, ...] = METHODS
    n_calibration: int = 64
    eval_sequences: int = 64
    threads: int = 1
    decode_version: int = 7
    decode_n_layer: int = 4
    decode_n_embd: int = 1024
    decode_tokens: int = 64
    decode_rounds: int = 3
    decode_timeout_s: float = 900.0
    quick: bool = False
    progress: bool = True

    def __post_init__(self):
        self.out = Path(self.out)
        for name in ("models", "bits", "methods"):
            setattr(self, name, tuple(getattr(self, name)))
        self.validate()

    @classmethod
    def quick_preset(cls, out, **overrides) -> "RWKVDeployOptions":
        """One model, 4 bits, RTN and RWKVQuant, 8 eval windows, a small decode model: seconds, not minutes."""
        kw = dict(models=("rwkv7-ref",), bits=(4,), methods=("rtn", "rwkvquant"), n_calibration=16,
                  eval_sequences=8, decode_n_layer=1, decode_n_embd=256, decode_tokens=16, decode_rounds=1, quick=True)
        return cls(out=out, **{**kw, **overrides})

    def _fail(self, field_name: str, problem: str, fix: str) -> None:
        raise EdgesmithError(f"deploy rwkv: {field_name} {problem}.", fix)

    def validate(self) -> None:
        if self.target != TARGET:
            self._fail("--target", f"is {self.target!r}, but RWKV deploys only to {TARGET} (it measures decode "
                       "speed on this machine)", f"use --target {TARGET}.")
        for name, allowed in (("models", REF_MODELS), ("bits", BITS), ("methods", METHODS)):
            vals = getattr(self, name)
            if not vals or any(v not in allowed for v in vals):
                self._fail(name, f"is {list(vals)!r}", f"choose from {', '.join(map(str, allowed))}.")
        ints = {"n_calibration": 1, "eval_sequences": 1, "threads": 1, "decode_n_layer": 1, "decode_tokens": 1,
                "decode_rounds": 1, "decode_n_embd": 64}
        for name, lo in ints.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                self._fail(name, f"is {v!r}", f"use a whole number of at least {lo}.")
        if self.decode_n_embd % 64:  # the decode model uses heads of 64 channels
            self._fail("decode_n_embd", f"is {self.decode_n_embd}", "use a multiple of 64.")
        if self.decode_version not in (6, 7):
            self._fail("decode_version", f"is {self.decode_version!r}", "use 6 or 7.")
        if not float(self.decode_timeout_s) > 0:
            self._fail("decode_timeout_s", f"is {self.decode_timeout_s!r}", "use a positive number of seconds.")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RWKVDeployOptions":
        return cls(**d)


_GENERIC_ONLY = {"recipe": "--recipe", "seed": "--seed", "batch": "--batch", "warmup": "--warmup", "reps": "--reps",
                 "calibration": "--calibration", "percentile": "--percentile", "int4_block_size": "--int4-block-size",
                 "prune_sparsity": "--prune-sparsity", "tvm_tune_trials": "--tvm-tune-trials", "no_tvm": "--no-tvm",
                 "variant": "--variant", "sensitivity": "--sensitivity"}


def options_from_args(args) -> RWKVDeployOptions:
    """``edgesmith deploy rwkv`` flags -> options; flags of the generic pipeline are refused, not ignored."""
    given = [flag for name, flag in _GENERIC_ONLY.items() if getattr(args, name, None) not in (None, False, [])]
    if given:
        raise EdgesmithError(f"{', '.join(given)} do(es) not apply to `deploy rwkv`.",
                             "use --out, --force, --threads, --n-calibration, --quick and --quiet with it.")
    if not args.target:
        raise EdgesmithError("no target given.", f"pass --target {TARGET}.")
    kw = {"out": args.out or f"runs/rwkv-{args.target}", "target": args.target, "force": bool(args.force),
          "progress": not args.quiet}
    if args.threads is not None:
        kw["threads"] = args.threads
    if args.n_calibration is not None:
        kw["n_calibration"] = args.n_calibration
    return RWKVDeployOptions.quick_preset(**kw) if getattr(args, "quick", False) else RWKVDeployOptions(**kw)


def largest_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> tuple[int, int] | None:
    """(level, bytes) of the last-level cache of CPU 0 from sysfs, or None where sysfs does not say."""
    best = None
    for index in sorted(Path(root).glob("index*")):
        try:
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        try:
            n = int(size.rstrip("KMG")) * scale
        except ValueError:
            continue
        if best is None or (level, n) > best:
            best = (level, n)
    return best


def measure_decode(opts: RWKVDeployOptions, workdir: Path) -> dict:
    """Run ``rwkv_decode_speed`` in a fresh process and add how it was measured and the cache it must beat."""
    out = workdir / "decode_speed.json"
    cmd = [sys.executable, "-m", DECODE_SCRIPT, "--version", str(opts.decode_version), "--n-layer",
           str(opts.decode_n_layer), "--n-embd", str(opts.decode_n_embd), "--tokens", str(opts.decode_tokens),
           "--rounds", str(opts.decode_rounds), "--threads", str(opts.threads), "--bits", "4", "--out", str(out)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["OMP_NUM_THREADS"] = str(opts.threads)
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=opts.decode_timeout_s)
    except subprocess.TimeoutExpired:
        raise EdgesmithError(f"the decode-speed measurement took longer than {opts.decode_timeout_s:.0f} s.",
                             "use --quick, or run it on a less loaded machine.") from None
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr.strip().splitlines() or ["(no error output)"])[-1][:300]
        raise RuntimeError(f"{DECODE_SCRIPT} failed (exit {proc.returncode}): {tail}")
    res = json.loads(out.read_text())
    res["method"] = (f"measured: onnxruntime CPU, batch 1, greedy decoding; {opts.decode_tokens} timed steps after "
                     f"4 warm-up steps, median of {opts.decode_rounds} round(s); perf_counter; fresh process "
                     f"(python -m {DECODE_SCRIPT}); random weights (speed does not depend on their values)")
    res["provenance"] = "measured"
    res["bound_method"] = ("bytes-per-token bound: initializer bytes of the step graph (read once per token) "
                           "divided by a measured large-memcpy bandwidth")
    cache = largest_cache_bytes()
    res["last_level_cache"] = {"level": cache[0], "bytes": cache[1]} if cache else None
    if cache:
        res["fp32_weights_exceed_cache"] = res["fp32"]["weight_bytes_per_token"] > cache[1]
    return res


def deploy_rwkv(opts: RWKVDeployOptions) -> Path:
    """Perplexity table, RWKVQuant per-layer decisions, plots and decode speed -> ``opts.out`` (atomic)."""
    import torch

    from edgesmith.hardware import get_target

    if opts.out.exists() and not opts.force:
        raise EdgesmithError(f"output folder {opts.out} already exists.",
                             "choose another --out or pass --force to replace it.")
    steps = len(opts.models) * (1 + len(opts.bits) * len(opts.methods)) + 1
    bar = tqdm(total=steps, desc="deploy rwkv", unit="step", disable=not opts.progress)

    def log(msg: str) -> None:  # run_model logs once per finished step (fp32, then each bits x method)
        if opts.progress:
            bar.write(msg)
        bar.update(1)

    prev_threads = torch.get_num_threads()
    torch.set_num_threads(opts.threads)
    try:
        with atomic_path(opts.out, force=opts.force) as tmp:
            tmp.mkdir(parents=True)
            results = []
            for name in opts.models:
                bar.set_postfix_str(name)
                results.append(run_model(name, opts.bits, opts.n_calibration, log=log, methods=opts.methods,
                                         eval_sequences=opts.eval_sequences, save_dir=tmp / "checkpoints"))
            bar.set_postfix_str("decode speed")
            with tempfile.TemporaryDirectory() as work:
                decode = measure_decode(opts, Path(work))
            bar.update(1)
            plot(results, tmp / "ppl_vs_bpw.png")
            plots = ["ppl_vs_bpw.png"]
            if plot_layer_errors(results, tmp / "rwkvquant_layers.png"):
                plots.append("rwkvquant_layers.png")
            report = {"model": "rwkv", "kind": "rwkv-quantization-and-decode",
                      "target": get_target(opts.target).describe(),
                      "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                      "options": opts.to_dict(), "threads": opts.threads, "environment": environment(),
                      "perplexity": results, "decode_speed": decode, "plots": plots,
                      "notes": ["bpw counts every stored bit of the block linears (codes, scales, zero points, "
                                "codebooks); embedding, head, LoRA and decay tensors stay in high precision and are "
                                "counted only in the file size",
                                "the fp32 row's size is its fp32 tensor bytes (the shipped reference .pth is fp16, "
                                "half of that); quantized rows give the saved checkpoint's size on disk",
                                "calibration windows come from the training split; perplexity is scored on the "
                                "held-out split only",
                                "quantized checkpoints are in checkpoints/ (load with "
                                "edgesmith.compress.rwkvquant.load_quantized); file size is their size on disk"]}
            write_json(tmp / "report.json", report)
            (tmp / "report.md").write_text(render_markdown(report))
    finally:
        torch.set_num_threads(prev_threads)
        bar.close()
    return opts.out


# --- rendering --------------------------------------------------------------------------------------


def _rwkvquant_rows(results: list[dict]):
    for res in results:
        for row in res["rows"]:
            if row["method"] == "rwkvquant":
                yield res, row


def _layer_table(row: dict) -> list[str]:
    lines = ["| layer | decision | bpw | weight SQNR (dB) | rel. output error | P_c | P_f | why |",
             "|---|---|---|---|---|---|---|---|"]
    vec = []
    for layer in row["layers"]:
        e = layer.get("error", {})
        if layer["action"] == "codebook":
            vec.append(layer)
            continue
        fmt = lambda k, f: f.format(e[k]) if k in e else "-"  # noqa: E731
        lines.append(f"| {layer['name']} | {layer['action'].split('-')[-1]} | {layer['bits_per_weight']:.3f} "
                     f"| {fmt('weight_sqnr_db', '{:.2f}')} | {fmt('hessian_rel_error', '{:.5f}')} "
                     f"| {fmt('P_c', '{:.3f}')} | {fmt('P_f', '{:.4g}')} | {layer.get('reason', '')} |")
    if vec:
        lines += ["", "Multiplication vectors (weighted codebooks; error weighted by the clipped E[x^2] of the "
                  "token shift, vs plain k-means with the same bits):", "",
                  "| vector | bpw | weighted error | plain k-means weighted error |", "|---|---|---|---|"]
        for layer in vec:
            e = layer["error"]
            lines.append(f"| {layer['name']} | {layer['bits_per_weight']:.3f} | {e['weighted_error']:.3g} "
                         f"| {e['unweighted_kmeans_weighted_error']:.3g} |")
    return lines


def render_markdown(report: dict) -> str:
    env, dec, opts = report["environment"], report["decode_speed"], report["options"]
    lines = [f"# RWKV on {report['target']['name']}: quantization and decode speed", "",
             f"{report['date']}; {env['cpu']} ({env['cpu_count']} cores); torch {env['torch']}, onnxruntime "
             f"{env['onnxruntime']}; threads {report['threads']}" + ("; **quick run**" if opts["quick"] else ""), "",
             "## Perplexity (held-out stdlib text, next-byte)", "",
             markdown(report["perplexity"]).rstrip(), "", "![perplexity vs bits per weight](ppl_vs_bpw.png)", ""]
    lines += ["## RWKVQuant per-layer decisions and errors", ""]
    rows = list(_rwkvquant_rows(report["perplexity"]))
    if not rows:
        lines += ["RWKVQuant was not among the methods of this run.", ""]
    for res, row in rows:
        d = row["decision"]
        th = (f"P_c threshold {d['tau_c']:.3f}, P_f threshold {d['tau_f']:.4g} (percentile {d['percentile']})"
              if d.get("proxy") == "paper" else json.dumps(d))
        lines += [f"### {res['model']}, {row['bits']} bits: {row['n_sq']} SQ / {row['n_vq']} VQ; {th}", "",
                  *_layer_table(row), ""]
    if "rwkvquant_layers.png" in report["plots"]:
        lines += ["![per-layer output error](rwkvquant_layers.png)", ""]
    cache = dec.get("last_level_cache")
    cfg = dec["model"]
    lines += ["## Decode speed (onnxruntime, batch 1, measured)", "",
              f"Model: RWKV-{cfg['version']}, {cfg['n_layer']} layers x {cfg['n_embd']}, random weights; "
              f"int4 = block linears RTN 4-bit group {dec['group']} as MatMulNBits (accuracy_level 4). "
              f"Threads {dec['threads']}. Copy bandwidth {dec['copy_bandwidth_GBps']:.1f} GB/s.", "",
              "| graph | weight MB/token | tokens/s (measured) | bytes-per-token bound tokens/s | same tokens as torch |",
              "|---|---|---|---|---|"]
    for k in ("fp32", f"int{dec['bits']}"):
        r = dec[k]
        lines.append(f"| {k} | {r['weight_bytes_per_token'] / 1e6:.1f} | {r['tokens_per_s']:.2f} "
                     f"| {r['bound_tokens_per_s']:.1f} | {dec['same_tokens_as_torch'][k]} |")
    lines += ["", f"Speed-up int{dec['bits']} / fp32: {dec['speedup']:.2f}x.", ""]
    if cache:
        verdict = "exceed" if dec.get("fp32_weights_exceed_cache") else "do NOT exceed"
        lines.append(f"The fp32 weights ({dec['fp32']['weight_bytes_per_token'] / 2**20:.1f} MiB) {verdict} the "
                     f"L{cache['level']} cache ({cache['bytes'] / 2**20:.0f} MiB).")
    lines += [f"Method: {dec['method']}.", f"Bound: {dec['bound_method']}.", "", "## Notes", ""]
    lines += [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def plot_layer_errors(results: list[dict], path: Path) -> bool:
    """Per linear layer: RWKVQuant's relative output error (bar colour = SQ/VQ) beside GPTQ's and GPTVQ's."""
    panels = list(_rwkvquant_rows(results))
    if not panels:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.2 * len(panels)), squeeze=False)
    for ax, (res, row) in zip(axes[:, 0], panels):
        linears = [layer for layer in row["layers"] if layer["action"] != "codebook"]
        names = [layer["name"].replace("blocks.", "b") for layer in linears]
        errs = [layer["error"]["hessian_rel_error"] for layer in linears]
        colours = ["tab:orange" if layer["action"].endswith("VQ") else "tab:blue" for layer in linears]
        ax.bar(range(len(names)), errs, color=colours)
        for method, marker in (("rtn", "+"), ("gptq", "x"), ("gptvq", "o")):
            other = next((r for r in res["rows"] if r["method"] == method and r["bits"] == row["bits"]), None)
            if other:
                by_name = {layer["name"]: layer["error"]["hessian_rel_error"] for layer in other["layers"]
                           if "hessian_rel_error" in layer.get("error", {})}
                ax.scatter(range(len(names)), [by_name.get(layer["name"]) for layer in linears], marker=marker,
                           color="k", label=f"{method} (same bits)", zorder=3)
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("rel. output error")
        ax.set_title(f"{res['model']} {row['bits']}-bit RWKVQuant: blue SQ (GPTQ), orange VQ (GPTVQ)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return True
