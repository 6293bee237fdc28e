"""Fuzzing the files edgesmith reads: mutated bytes of a valid file of each input format, each run through the
command that reads it, in this process, with a time limit.

Every case must end one of two ways: exit 0, or exit 2 with one ``edgesmith: error:`` line (and its ``fix:``
line). Anything else is counted against its format: ``internal`` (an exception edgesmith did not turn into a
user error: a traceback without the CLI's last-resort catch), ``hang`` (past the time limit), ``leftover`` (a
temporary file or a half-written output after the case, or a scratch folder of this process in ``$TMPDIR``),
``other`` (another exit code or message shape). Cases are made from ``(format, index, seed)`` alone, so a
failing case is reproduced by its number: ``python -m edgesmith.bench.studies.fuzz_inputs --format F
--only N``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

OUTCOMES = ("clean", "internal", "hang", "leftover", "other")


@dataclass(frozen=True)
class Format:
    """One input format: the seed file it is made from (``make(folder) -> path``) and the command that reads a
    mutated copy (``argv(fuzzed, folder, seeds) -> argv``; outputs go in ``folder``, the valid files it needs
    besides are in ``seeds``)."""

    name: str
    suffix: str
    make: Callable[[Path], Path]
    argv: Callable[[Path, Path], list]
    text: bool = False  # mutate values in the text as well as bytes (TOML)


@dataclass
class CaseResult:
    format: str
    index: int
    mutation: str
    outcome: str
    exit: int | None
    seconds: float
    message: str = ""


@dataclass
class FormatSummary:
    format: str
    cases: int = 0
    counts: dict = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    exit0: int = 0
    seed_clean: bool = False  # the unmutated seed file runs to exit 0: the command reads real files, not only refusals
    seconds: float = 0.0
    failures: list = field(default_factory=list)  # CaseResults that were not clean


# --- the seed files ------------------------------------------------------------------------------------------


def matmul_onnx(path: Path, n_in: int, n_out: int) -> Path:
    """A one-MatMul ONNX model ``x (b, n_in) @ w -> y (b, n_out)``, weights drawn from seed 0."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).normal(size=(n_in, n_out)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", n_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", n_out])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _onnx_mlp(folder: Path) -> Path:
    return matmul_onnx(folder / "seed.onnx", 8, 4)


def _calib(folder: Path) -> Path:
    path = folder / "seed.npy"
    np.save(path, np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32))
    return path


def _calib_npz(folder: Path) -> Path:
    path = folder / "seed.npz"
    np.savez(path, x=np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32))
    return path


def _wav(folder: Path) -> Path:
    from scipy.io import wavfile

    t = np.arange(8000) / 16000
    x = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * np.random.default_rng(0).normal(size=t.size)
    path = folder / "seed.wav"
    wavfile.write(path, 16000, (x * 32767).astype(np.int16))
    return path


def _toml(folder: Path) -> Path:
    path = folder / "seed.toml"
    path.write_text('model = "digits-mlp"\ntarget = "jetson-orin-nano"\nseed = 0\n[plan]\nvariants = ["fp32"]\n'
                    "[bench]\nreps = 5\nwarmup = 1\nbatch_sizes = [1]\n[options]\n[model_options]\n")
    return path


def _netx(folder: Path) -> Path:
    from edgesmith.bench import api

    path = folder / "seed.net"
    api.quantize("digits-mlp", "export-netx", out=path)
    return path


def _nir(folder: Path) -> Path:
    from edgesmith.testing import write_nir_chain

    path = folder / "seed.nir"
    write_nir_chain(path, 8, 12)
    return path


def _pth(folder: Path) -> Path:
    import torch

    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model, official_state_dict

    torch.manual_seed(0)
    path = folder / "seed.pth"
    torch.save(official_state_dict(build_model(RWKVConfig(version=7, n_layer=1, n_embd=64, head_size=32))), path)
    return path


def _pt2(folder: Path) -> Path:
    import torch

    torch.manual_seed(0)
    path = folder / "seed.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 2).eval(), (torch.zeros(2, 4),)), str(path))
    return path


def _trees(folder: Path) -> Path:
    from edgesmith.models.gbrl import GBTEnsemble

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    ens = GBTEnsemble(4, 2, max_depth=2)
    for _ in range(4):
        ens.fit_step(x, rng.normal(size=(64, 2)).astype(np.float32))
    path = folder / "seed.npz"
    ens.save(path)
    return path


def _quantize_onnx(f: Path, d: Path, s: Path) -> list:
    return ["quantize", f, "--calibration-data", s / "seed.npy", "--out", d / "q.onnx", "--quiet"]


def _quantize_with(f: Path, d: Path, s: Path) -> list:
    return ["quantize", s / "seed.onnx", "--calibration-data", f, "--out", d / "q.onnx", "--quiet"]


FORMATS = {f.name: f for f in [
    Format("onnx", ".onnx", _onnx_mlp, _quantize_onnx),
    Format("npy", ".npy", _calib, _quantize_with),
    Format("npz", ".npz", _calib_npz, _quantize_with),
    Format("wav", ".wav", _wav, lambda f, d, s: ["denoise", f, "--out", d / "o.wav", "--quiet"]),
    Format("toml", ".toml", _toml, lambda f, d, s: ["deploy", "--recipe", f, "--out", d / "r", "--quiet"], text=True),
    Format("netx", ".net", _netx, lambda f, d, s: ["deploy", f, "--target", "loihi2", "--input-shape", "64", "--out",
                                                d / "r", "--quiet"]),
    Format("nir", ".nir", _nir, lambda f, d, s: ["deploy", f, "--target", "loihi2", "--calibration-data",
                                                 s / "nir-data.npy", "--out", d / "r", "--quiet"]),
    Format("pth", ".pth", _pth, lambda f, d, s: ["export", f, "--out", d / "o.pth"]),
    Format("pt2", ".pt2", _pt2, lambda f, d, s: ["export", f, "--input-shape", "4", "--out", d / "o.onnx"]),
    Format("trees", ".npz", _trees, lambda f, d, s: ["deploy", f, "--target", "host-cpu", "--input-shape", "4",
                                                     "--no-tvm", "--batch", "1", "--reps", "5", "--warmup", "1",
                                                     "--out", d / "r", "--quiet"]),
]}


def make_seeds(folder: Path, names) -> dict[str, Path]:
    """The seed file of each named format (and the shared data files the commands read) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    _onnx_mlp(folder)
    _calib(folder)
    np.save(folder / "nir-data.npy", np.abs(np.random.default_rng(1).normal(size=(8, 8))).astype(np.float32))
    seeds = {}
    for name in names:
        sub = folder / f"seed-{name}"
        sub.mkdir(exist_ok=True)
        seeds[name] = FORMATS[name].make(sub)
    return seeds


# --- mutations -----------------------------------------------------------------------------------------------

_INTERESTING = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xff" * 8)
_TOML_VALUES = ("-1", "0", "1e309", "nan", "inf", '"x"', "true", "[]", "{}", str(2**70), "-9223372036854775808",
                '"../../etc/passwd"', '"/dev/zero"', "[1, 2, 3]", '"' + "a" * 400 + '"', "1.5", '"\\u0000"')


def _mutate_bytes(data: bytes, rng: np.random.Generator) -> tuple[bytes, str]:
    b = bytearray(data)
    n = len(b)
    op = int(rng.integers(6)) if n else 4
    if op == 0:
        k = int(rng.integers(1, 9))
        for _ in range(k):
            i = int(rng.integers(n))
            b[i] ^= 1 << int(rng.integers(8))
        return bytes(b), f"flip {k} bit(s)"
    if op == 1:
        cut = int(rng.integers(n))
        return bytes(b[:cut]), f"truncate at {cut}"
    if op == 2:
        i, k = int(rng.integers(n)), int(rng.integers(1, 65))
        b[i:i + k] = rng.integers(0, 256, size=min(k, n - i), dtype=np.uint8).tobytes()
        return bytes(b), f"random {k} byte(s) at {i}"
    if op == 3:
        i, v = int(rng.integers(n)), _INTERESTING[int(rng.integers(len(_INTERESTING)))]
        b[i:i + len(v)] = v[:n - i]
        return bytes(b), f"write {v.hex()} at {i}"
    if op == 4:
        i, k = int(rng.integers(n + 1)), int(rng.integers(1, 65))
        b[i:i] = rng.integers(0, 256, size=k, dtype=np.uint8).tobytes()
        return bytes(b), f"insert {k} byte(s) at {i}"
    i, k = int(rng.integers(n)), int(rng.integers(1, 65))
    del b[i:i + k]
    return bytes(b), f"delete {k} byte(s) at {i}"


def _mutate_member(data: bytes, rng: np.random.Generator) -> tuple[bytes, str] | None:
    """A valid zip whose one member is mutated (torch's .pt2/.pth and numpy's .npz are zips): the bytes inside get
    past the archive's checksums, where whole-file mutations mostly stop."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = [(i, z.read(i.filename)) for i in z.infolist()]
    except Exception:
        return None
    k = int(rng.integers(len(members)))
    body, how = _mutate_bytes(members[k][1], rng)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for j, (info, content) in enumerate(members):
            z.writestr(info, body if j == k else content)
    return out.getvalue(), f"member {members[k][0].filename}: {how}"


def _mutate_text(data: bytes, rng: np.random.Generator) -> tuple[bytes, str]:
    lines = data.decode().splitlines()
    valued = [i for i, ln in enumerate(lines) if "=" in ln]
    i = valued[int(rng.integers(len(valued)))]
    key = lines[i].split("=", 1)[0]
    value = _TOML_VALUES[int(rng.integers(len(_TOML_VALUES)))]
    lines[i] = f"{key}= {value}"
    return ("\n".join(lines) + "\n").encode(), f"{key.strip()} = {value[:40]}"


def mutate(fmt: Format, data: bytes, index: int, seed: int = 0) -> tuple[bytes, str]:
    """Case ``index`` of ``fmt``: one to three mutations, chosen by ``(format, index, seed)`` alone."""
    rng = np.random.default_rng([seed, index, sum(fmt.name.encode())])
    how = []
    for _ in range(int(rng.integers(1, 4))):
        choice = rng.random()
        got = None
        if fmt.text and choice < 0.6:
            try:
                got = _mutate_text(data, rng)
            except (UnicodeDecodeError, ValueError, IndexError):
                got = None
        elif choice < 0.5:
            got = _mutate_member(data, rng)
        data, what = got or _mutate_bytes(data, rng)
        how.append(what)
    return data, "; ".join(how)


# --- running a case ------------------------------------------------------------------------------------------


class _Hang(BaseException):
    """Raised by the timer: a BaseException, so no ``except Exception`` of the code under test can swallow it."""


def _alarm(signum, frame):
    raise _Hang()


def _scratch_of_this_process() -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"edgesmith-*.{os.getpid()}.*"))


def run_case(fmt: Format, index: int, seed_file: Path, work: Path, *, seed: int = 0,
             timeout_s: float = 60.0) -> CaseResult:
    """Run one mutated copy of ``seed_file`` through ``fmt``'s command in a fresh folder under ``work``."""
    from edgesmith.bench.cli import main

    data, how = mutate(fmt, seed_file.read_bytes(), index, seed) if index >= 0 else (seed_file.read_bytes(), "none")
    folder = work / (f"{fmt.name}-{index:04d}" if index >= 0 else f"{fmt.name}-seed")
    folder.mkdir(parents=True)
    fuzzed = folder / f"case{fmt.suffix}"
    fuzzed.write_bytes(data)
    argv = [str(a) for a in fmt.argv(fuzzed, folder, seed_file.parent.parent)]
    err, out = io.StringIO(), io.StringIO()
    before = set(_scratch_of_this_process())
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    t0 = time.perf_counter()
    code = None
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main(argv)
    except _Hang:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - t0
    text = err.getvalue().strip()
    lines = text.splitlines()
    if code is None:
        return CaseResult(fmt.name, index, how, "hang", None, seconds, f"past {timeout_s:.0f} s")
    leftover = [p for p in folder.rglob("*") if p.name.endswith(".tmp") or ".tmp/" in str(p)]
    if code != 0:
        leftover += [p for p in folder.iterdir() if p != fuzzed]
    leftover += [p for p in _scratch_of_this_process() if p not in before]
    if code == 1 and lines and lines[0].startswith("edgesmith: internal error:"):
        outcome = "internal"
    elif code not in (0, 2):
        outcome = "other"
    elif code == 2 and not (1 <= len(lines) <= 2 and lines[0].startswith("edgesmith: error: ")
                            and all(ln.startswith("  fix: ") for ln in lines[1:])):
        outcome = "other"
    elif leftover:
        outcome = "leftover"
        lines = [f"left {', '.join(str(p.relative_to(work) if p.is_relative_to(work) else p) for p in leftover[:3])}"]
    else:
        outcome = "clean"
    return CaseResult(fmt.name, index, how, outcome, code, seconds, " / ".join(lines)[:400])


def fuzz(names, cases: int, work: Path, *, seed: int = 0, timeout_s: float = 60.0, only=None,
         progress: Callable[[str], None] | None = None) -> list[FormatSummary]:
    """``cases`` mutated files per format (or the indices in ``only``), each run as ``run_case``; cases that ended
    clean are removed from ``work`` as they go, the others kept for a look."""
    import shutil

    env = {"EDGESMITH_CACHE": str(work / "cache")}  # cached exports of mutated files stay out of the user's cache
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        seeds = make_seeds(work / "seeds", names)
        summaries = []
        for name in names:
            s = FormatSummary(name)
            t_format = time.perf_counter()
            check = run_case(FORMATS[name], -1, seeds[name], work / "cases", seed=seed, timeout_s=timeout_s)
            s.seed_clean = check.exit == 0 and check.outcome == "clean"
            if s.seed_clean:
                shutil.rmtree(work / "cases" / f"{name}-seed", ignore_errors=True)
            else:
                s.failures.append(asdict(check))
            for i in (only if only is not None else range(cases)):
                r = run_case(FORMATS[name], i, seeds[name], work / "cases", seed=seed, timeout_s=timeout_s)
                s.cases += 1
                s.counts[r.outcome] += 1
                s.exit0 += r.exit == 0
                if r.outcome == "clean":
                    shutil.rmtree(work / "cases" / f"{name}-{i:04d}", ignore_errors=True)
                else:
                    s.failures.append(asdict(r))
                if progress is not None:
                    done = s.cases
                    rate = done / (time.perf_counter() - t_format)
                    left = (len(only) if only is not None else cases) - done
                    progress(f"{name}: {done} cases ({rate:.1f}/s, ETA {left / rate:.0f} s), "
                             + ", ".join(f"{k} {v}" for k, v in s.counts.items() if v))
            s.seconds = time.perf_counter() - t_format
            summaries.append(s)
        return summaries
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def summary_table(summaries: list[FormatSummary]) -> str:
    lines = ["| format | seed runs | cases | clean | of which exit 0 | internal (traceback) | hang | leftover | other "
             "| seconds |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        c = s.counts
        lines.append(f"| {s.format} | {'yes' if s.seed_clean else 'NO'} | {s.cases} | {c['clean']} | {s.exit0} | "
                     f"{c['internal']} | {c['hang']} | {c['leftover']} | {c['other']} | {s.seconds:.0f} |")
    return "\n".join(lines) + "\n"


def to_json(summaries: list[FormatSummary]) -> str:
    return json.dumps([asdict(s) for s in summaries], indent=2) + "\n"
