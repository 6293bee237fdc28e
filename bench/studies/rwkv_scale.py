"""Quantizing an RWKV checkpoint of 0.1B shape: wall time and peak memory of every method on this machine.

    python -m edgesmith.bench.studies.rwkv_scale [--version 7] [--n-layer 12] [--n-embd 768] \
        [--vocab 65536] [--methods rwkv-rtn rwkv-gptq rwkv-gptvq rwkvquant] [--bits 3] [--threads 0] \
        [--sequential] [--out docs/results/rwkv_scale]

An official-layout ``.pth`` of the shape of RWKV-7 0.1B (12 layers, d 768, head 64, World vocabulary 65,536)
is written with random weights (N(0, 1/fan_in) matrices; the time and memory of quantization do not depend on
what the weights learned). Each method then runs in a fresh process, as a user's run would: load the file,
tokenize the calibration text with the World tokenizer (64 windows of 128 tokens from the stdlib training
split), quantize every block linear (``--sequential``: block-sequentially calibrated), write the quantized
checkpoint. The parent times the process
(``perf_counter`` around it) and reads its peak resident memory from the kernel (``wait4`` rusage
``ru_maxrss``); the child reports the time of each phase. Everything here is MEASURED on this machine.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgesmith.common import EdgesmithError, atomic_path, write_json

METHODS = ("rwkv-rtn", "rwkv-gptq", "rwkv-gptvq", "rwkvquant")


def write_checkpoint(path: Path, version: int, n_layer: int, n_embd: int, vocab: int, head_size: int = 64) -> dict:
    """A random official-layout checkpoint (fp16, as released checkpoints are); returns its shape and size."""
    import torch

    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model, official_state_dict

    torch.manual_seed(0)
    model = build_model(RWKVConfig(version=version, n_layer=n_layer, n_embd=n_embd, head_size=head_size,
                                   vocab_size=vocab)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0, 1.0 / p.shape[1] ** 0.5)
    with atomic_path(path, force=True) as tmp:
        torch.save(official_state_dict(model, torch.float16), tmp)
    return {"version": version, "n_layer": n_layer, "n_embd": n_embd, "vocab_size": vocab, "head_size": head_size,
            "params": sum(p.numel() for p in model.parameters()), "file_bytes": path.stat().st_size}


def child(pth: str, method: str, bits: int, out: str, n_calibration: int, seq_len: int,
          sequential: bool = False) -> dict:
    """One method in this (fresh) process: load, tokenize calibration text, quantize, save. Phase times."""
    t = {"start": time.perf_counter()}
    from edgesmith.compress.rwkvquant import make_config, quantize_rwkv, save_quantized
    from edgesmith.models.rwkv.checkpoint import load_rwkv
    from edgesmith.models.rwkv.data import load_splits, sequences
    from edgesmith.models.rwkv.tokenizer import tokenizer_for

    t["imported"] = time.perf_counter()
    model = load_rwkv(pth)
    t["loaded"] = time.perf_counter()
    tok = tokenizer_for(model.cfg.vocab_size, None)
    text = bytes(load_splits().train[:400_000].tolist()).decode("utf-8", errors="replace")
    calib = sequences(tok.encode(text), seq_len, n_calibration, seed=1)
    t["tokenized"] = time.perf_counter()
    q, rep = quantize_rwkv(model, calib, make_config(method.removeprefix("rwkv-"), bits=bits,
                                                     n_calibration=n_calibration, sequential=sequential),
                           inplace=True)
    t["quantized"] = time.perf_counter()
    path = save_quantized(q, out, force=True)
    t["saved"] = time.perf_counter()
    phases = ("imported", "loaded", "tokenized", "quantized", "saved")
    seconds = {p: t[p] - t[prev] for prev, p in zip(("start", *phases), phases)}
    return {"method": method, "bits": bits, "calibration": rep.extra["calibration"], "tokenizer": tok.name,
            "calibration_tokens": int(calib.size),
            "bits_per_weight": rep.bits_per_weight, "n_sq": rep.extra["n_sq"], "n_vq": rep.extra["n_vq"],
            "quantized_bytes": path.stat().st_size, "phase_s": {"import": seconds["imported"],
                                                                "load": seconds["loaded"],
                                                                "tokenize": seconds["tokenized"],
                                                                "quantize": seconds["quantized"],
                                                                "save": seconds["saved"]}}


def run_method(pth: Path, method: str, bits: int, folder: Path, threads: int, n_calibration: int,
               seq_len: int, sequential: bool = False) -> dict:
    """The child in a fresh process: its wall time and peak RSS as the kernel accounted them."""
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads))
    out = folder / f"{method}-{bits}b.pth"
    cmd = [sys.executable, "-m", "edgesmith.bench.studies.rwkv_scale", "--child", method, "--bits", str(bits),
           "--checkpoint", str(pth), "--child-out", str(out), "--n-calibration", str(n_calibration),
           "--seq-len", str(seq_len)] + (["--sequential"] if sequential else [])
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, so the child's own rusage is read
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0), se.seek(0)
        stdout, stderr = so.read().decode(), se.read().decode(errors="replace")
    if proc.returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit status {proc.returncode}"
        raise EdgesmithError(f"{method} failed: {last}",
                             "run the child command by hand to see the whole message: " + " ".join(cmd))
    result = json.loads(stdout.strip().splitlines()[-1])
    result.update(wall_s=wall, peak_rss_bytes=usage.ru_maxrss * 1024,  # Linux reports kilobytes
                  threads=threads or os.cpu_count())
    out.unlink(missing_ok=True)
    return result


def markdown(result: dict) -> str:
    shape = result["checkpoint"]
    lines = [f"RWKV-{shape['version']}, {shape['n_layer']} layers x {shape['n_embd']}, vocabulary {shape['vocab_size']}: "
             f"{shape['params'] / 1e6:.1f} M parameters, {shape['file_bytes'] / 2**20:.0f} MiB fp16 file; "
             f"{result['rows'][0]['calibration_tokens'] if result['rows'] else 0} calibration tokens "
             f"({result['rows'][0]['tokenizer'] if result['rows'] else '-'} tokenizer); "
             f"{result['machine']}.", "",
             "| method | calibration | bits | bpw | SQ/VQ | wall (s) | quantize (s) | load (s) | peak RSS (GiB) "
             "| file (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['method']} | {r['calibration']} | {r['bits']} | {r['bits_per_weight']:.3f} "
                     f"| {r['n_sq']}/{r['n_vq']} | {r['wall_s']:.1f} | {r['phase_s']['quantize']:.1f} | {r['phase_s']['load']:.1f} "
                     f"| {r['peak_rss_bytes'] / 2**30:.2f} | {r['quantized_bytes'] / 2**20:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, default=7, choices=(6, 7))
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=65536)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--bits", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="threads per method (0: every core)")
    ap.add_argument("--n-calibration", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--sequential", action="store_true", help="block-sequential calibration (sequential=true)")
    ap.add_argument("--out", type=Path, default=Path("docs/results/rwkv_scale"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.checkpoint, a.child, a.bits, a.child_out, a.n_calibration, a.seq_len,
                               a.sequential)))
        return 0
    from tqdm.auto import tqdm

    from edgesmith.bench.pipeline.deploy import environment

    rows = []
    with tempfile.TemporaryDirectory(prefix="edgesmith-rwkv-scale-") as tmp:
        pth = Path(tmp) / "rwkv-0.1b-shape.pth"
        shape = write_checkpoint(pth, a.version, a.n_layer, a.n_embd, a.vocab)
        bar = tqdm(a.methods, desc="quantize", unit="method")
        for method in bar:
            bar.set_postfix_str(method)
            rows.append(run_method(pth, method, a.bits, Path(tmp), a.threads, a.n_calibration, a.seq_len,
                                   a.sequential))
            bar.write(f"{method}: {rows[-1]['wall_s']:.1f} s, peak {rows[-1]['peak_rss_bytes'] / 2**30:.2f} GiB")
    env = environment()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "checkpoint": shape, "rows": rows,
              "machine": f"{env['cpu_count']} cores, {env['cpu']}",
              "environment": env, "provenance": "measured: perf_counter wall time around a fresh process; "
                                                "peak resident memory from the kernel (wait4 ru_maxrss)"}
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / "scale.json", result)
    md = markdown(result)
    with atomic_path(a.out / "scale.md", force=True) as tmp:
        tmp.write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except EdgesmithError as e:  # a failed method: one message, no traceback
        print(f"rwkv_scale: error: {e.problem}\n  fix: {e.fix}", file=sys.stderr)
        raise SystemExit(1) from None
