"""Latency measurement that says how it was measured: per-call samples, percentiles, spread, method.

``measure_latency`` times a loaded runtime in this process. ``measure_isolated`` runs the same
measurement in a fresh Python process per artifact (``python -m edgesmith.bench.measure.worker``), because numbers taken
in a process that has just trained or compressed models are noisy (allocator and cache state, threads
left over) and its peak RSS belongs to everything the process did, not to the artifact.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgesmith.bench.measure.memory import MemoryStats, artifact_size_bytes, current_rss_bytes, peak_rss_bytes
from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError, run_child, write_json, scratch_dir
from edgesmith.runtimes.base import Runtime, as_input, get_runtime

METHOD_IN_PROCESS = "perf_counter_ns around run(), in-process"
METHOD_ISOLATED = "perf_counter_ns around run(), fresh process (python -m edgesmith.bench.measure.worker)"
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LatencyStats:
    """Per-call latency of one artifact on one runtime, in seconds.

    ``samples_s`` are the raw timed calls (warm-up calls excluded); every other figure is derived from
    them. ``std`` is the sample standard deviation, ``iqr`` is p75 - p25 and ``cv`` is std / mean.
    """

    n: int
    warmup: int
    threads: int | None
    batch: int
    p50: float
    p90: float
    p99: float
    mean: float
    std: float
    min: float
    max: float
    iqr: float
    cv: float
    samples_s: list[float] = field(repr=False)
    runtime: str = ""
    method: str = METHOD_IN_PROCESS

    @classmethod
    def from_samples(cls, samples_s, *, warmup: int, threads: int | None, batch: int, runtime: str,
                     method: str) -> "LatencyStats":
        s = np.asarray(samples_s, dtype=np.float64)
        if s.ndim != 1 or s.size == 0:
            raise ValueError("latency statistics need at least one sample")
        p25, p50, p75, p90, p99 = np.percentile(s, [25, 50, 75, 90, 99])
        mean = float(s.mean())
        std = float(s.std(ddof=1)) if s.size > 1 else 0.0
        return cls(n=int(s.size), warmup=int(warmup), threads=threads, batch=int(batch), p50=float(p50),
                   p90=float(p90), p99=float(p99), mean=mean, std=std, min=float(s.min()), max=float(s.max()),
                   iqr=float(p75 - p25), cv=std / mean if mean > 0 else 0.0, samples_s=[float(v) for v in s],
                   runtime=runtime, method=method)

    @property
    def p50_per_sample(self) -> float:
        """Median seconds per sample of the batch."""
        return self.p50 / self.batch

    @property
    def throughput_per_s(self) -> float:
        """Samples per second at the median call time."""
        return self.batch / self.p50 if self.p50 > 0 else float("inf")

    def to_dict(self, *, samples: bool = True) -> dict:
        d = dataclasses.asdict(self)
        if not samples:
            d.pop("samples_s")
        d["p50_per_sample"] = self.p50_per_sample
        d["throughput_per_s"] = self.throughput_per_s
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LatencyStats":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _check_counts(warmup: int, reps: int, min_time_s: float) -> None:
    if int(warmup) != warmup or warmup < 0:
        raise EdgesmithError(f"warmup must be a whole number >= 0, got {warmup!r}.", "pass e.g. warmup=20.")
    if int(reps) != reps or reps < 1:
        raise EdgesmithError(f"reps must be a whole number >= 1, got {reps!r}.", "pass e.g. reps=200.")
    if not min_time_s >= 0:
        raise EdgesmithError(f"min_time_s must be >= 0 seconds, got {min_time_s!r}.",
                             "pass 0 to time exactly reps calls.")


def check_precision(precision) -> None:
    if isinstance(precision, bool) or not isinstance(precision, (int, float)) or not 0 <= precision < 1:
        raise EdgesmithError(f"latency precision must be a fraction from 0 to below 1, got {precision!r}.",
                             "pass e.g. 0.03 (stop once the p50 is known to +-3%), or 0 to time every call asked for.")


def _as_inputs(inputs):
    """Inputs in the form a runtime computes with (float64 -> float32, other dtypes kept), one array or a
    dict of named arrays (several inputs, or a step graph's input and state), batch first."""
    named = dict(inputs) if isinstance(inputs, dict) else None
    arrays = {k: as_input(v) for k, v in named.items()} if named is not None else {"": as_input(inputs)}
    for name, x in arrays.items():
        if x.ndim == 0 or x.shape[0] == 0:
            raise EdgesmithError(f"inputs{' ' + repr(name) if name else ''} have shape {x.shape}; latency needs a "
                                 "batch of at least one sample.", "pass an array shaped (batch, ...) with batch >= 1.")
    return arrays if named is not None else arrays[""]


def _batch_of(x) -> int:
    return int(next(iter(x.values())).shape[0]) if isinstance(x, dict) else int(x.shape[0])


MIN_CALLS_FOR_PRECISION = 20  # the p50's interval needs this many calls before it may end the timing


def median_interval(samples) -> tuple[float, float]:
    """The distribution-free 95% confidence interval of the median of ``samples`` (order statistics: ranks
    n/2 -+ 0.98 sqrt(n), the normal approximation of the binomial), as (low, high)."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(x)
    half = 0.98 * math.sqrt(n)
    lo, hi = max(int(math.floor(n / 2 - half)), 0), min(int(math.ceil(n / 2 + half)), n - 1)
    return float(x[lo]), float(x[hi])


def p50_known(samples, precision: float) -> bool:
    """Whether the median's 95% interval lies within +-``precision`` of the median itself."""
    if len(samples) < MIN_CALLS_FOR_PRECISION:
        return False
    lo, hi = median_interval(samples)
    med = float(np.median(samples))
    return med > 0 and (hi - lo) / 2 <= precision * med


# with a precision goal, how long a batch size is timed at most (once MIN_BUDGETED calls are in) and warmed up at
# most (once 2 calls are in): a 1-second call at batch 64 is then timed 5 or 6 times, not 20 + 200
PRECISION_BUDGET_S, WARMUP_BUDGET_S, MIN_BUDGETED = 5.0, 2.0, 5


def measure_latency(runtime: Runtime, inputs, *, warmup: int = 20, reps: int = 200, min_time_s: float = 0.0,
                    method: str | None = None, precision: float = 0.0) -> LatencyStats:
    """Time ``runtime.run(inputs)`` call by call with ``time.perf_counter_ns``.

    ``warmup`` untimed calls come first (first calls pay for allocation, kernel selection, caches).
    Then at least ``reps`` calls are timed, and more until their total reaches ``min_time_s``. With
    ``precision`` > 0, ``reps`` is the most: the timing stops once ``min_time_s`` is spent and the p50's 95%
    interval is within +-``precision`` of it (checked every 10 calls from the 20th), so a slow call on a big
    batch is not repeated 200 times to learn what 40 calls already tell; it also stops after PRECISION_BUDGET_S of
    timed calls (at least MIN_BUDGETED of them) and warms up for at most WARMUP_BUDGET_S (at least 2 calls): the
    stats' ``n`` and ``cv`` then say how well the p50 is known. Inputs are converted once (contiguous, float32 for
    floats), so the timed calls do not include a conversion.
    """
    _check_counts(warmup, reps, min_time_s)
    check_precision(precision)
    if not hasattr(runtime, "artifact_"):
        raise EdgesmithError(f"runtime {runtime.name!r} has no model loaded.", "call runtime.load(artifact) first.")
    x = _as_inputs(inputs)
    clock = time.perf_counter_ns
    warmed, start = 0, clock()
    while warmed < warmup and not (precision > 0 and warmed >= 2 and clock() - start >= WARMUP_BUDGET_S * 1e9):
        runtime.run(x)
        warmed += 1
    budget_ns = int(min_time_s * 1e9)
    samples_ns: list[int] = []
    spent_ns = 0
    while len(samples_ns) < reps or spent_ns < budget_ns:
        t0 = clock()
        runtime.run(x)
        dt = clock() - t0
        samples_ns.append(dt)
        spent_ns += dt
        if precision > 0 and spent_ns >= budget_ns and (
                (len(samples_ns) % 10 == 0 and p50_known(samples_ns, precision))
                or (len(samples_ns) >= MIN_BUDGETED and spent_ns >= PRECISION_BUDGET_S * 1e9)):
            break
    return LatencyStats.from_samples(np.asarray(samples_ns, dtype=np.float64) * 1e-9, warmup=warmed,
                                     threads=runtime.threads, batch=_batch_of(x), runtime=runtime.name,
                                     method=method or METHOD_IN_PROCESS)


def outputs_checksum(outputs: np.ndarray) -> str:
    """SHA-256 of an output array's dtype, shape and bytes: equal outputs give equal checksums."""
    a = np.ascontiguousarray(outputs)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


@dataclass
class IsolatedResult:
    """Latency and memory of one artifact measured in its own process, plus its outputs.

    ``isolated`` is False only when a torch module could not be saved for the worker and was measured
    in this process instead (``latency.method`` then says why).
    """

    latency: LatencyStats
    memory: MemoryStats
    outputs: np.ndarray = field(repr=False)
    isolated: bool = True

    @property
    def outputs_sha256(self) -> str:
        return outputs_checksum(self.outputs)

    def to_dict(self, *, samples: bool = True) -> dict:
        """One flat dict (latency fields, memory fields, outputs checksum): one row of a report table."""
        return {**self.latency.to_dict(samples=samples), **self.memory.to_dict(), "isolated": self.isolated,
                "outputs_shape": list(self.outputs.shape), "outputs_sha256": self.outputs_sha256}


def _json_meta(meta: dict) -> dict:
    """The part of an artifact's meta that survives JSON (what a runtime reads: shapes, names)."""
    kept = {}
    for k, v in meta.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        kept[k] = v
    return kept


def _save_torch_program(artifact: Artifact, x: np.ndarray, path: Path) -> str | None:
    """Save the module as a torch.export program the worker can load; return why not, or None."""
    import torch

    try:
        program = torch.export.export(artifact.module, (torch.from_numpy(x),))
        torch.export.save(program, str(path))
    except Exception as e:  # export fails in many ways (data-dependent control flow, unsupported ops)
        text = str(e).strip()
        return (text.splitlines()[0] if text else type(e).__name__)[:200]
    return None


def _measure_here(runtime_name: str, artifact: Artifact, xs: list, *, threads, warmup, reps, min_time_s,
                  runtime_options: dict, why: str, precision: float = 0.0) -> list[IsolatedResult]:
    rt = get_runtime(runtime_name, threads=threads, **runtime_options)
    before = current_rss_bytes()
    rt.load(artifact)
    after = current_rss_bytes()
    method = (f"{METHOD_IN_PROCESS} (torch.export failed: {why}; memory figures belong to this shared "
              f"process, not to the artifact alone)")
    out = []
    for x in xs:
        stats = measure_latency(rt, x, warmup=warmup, reps=reps, min_time_s=min_time_s, method=method,
                                precision=precision)
        outputs = rt.run(x).outputs
        mem = MemoryStats(artifact_size_bytes(artifact), before, after, peak_rss_bytes(), isolated=False)
        out.append(IsolatedResult(stats, mem, outputs, isolated=False))
    return out


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:400] if lines else "(no error output)"


def _run_worker(workdir: Path, threads: int | None, timeout_s: float, what: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    try:
        proc = run_child([sys.executable, "-m", "edgesmith.bench.measure.worker", str(workdir)], cwd=REPO_ROOT, env=env,
                         timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        raise EdgesmithError(f"measuring {what} in a fresh process took longer than {timeout_s} s.",
                             "raise timeout_s, or lower reps / min_time_s.") from None
    if proc.returncode == 0 and (workdir / "result0.json").exists():
        return
    err_file = workdir / "error.json"
    if err_file.exists():  # a user error inside the worker: pass it on unchanged
        err = json.loads(err_file.read_text())
        raise EdgesmithError(err["problem"], err.get("fix"))
    raise EdgesmithError(
        f"the benchmark worker measuring {what} failed (exit code {proc.returncode}): {_last_line(proc.stderr)}",
        f"check that {what} loads and runs in this process with get_runtime(...).load(artifact).run(x).",
    )


def measure_isolated(runtime_name: str, artifact: Artifact, inputs, *, threads: int | None, warmup: int = 20,
                     reps: int = 200, min_time_s: float = 0.0, runtime_options: dict | None = None,
                     timeout_s: float = 600, precision: float = 0.0) -> IsolatedResult:
    """Measure latency and memory of ``artifact`` on ``runtime_name`` in a fresh Python process.

    File artifacts (onnx, lava) are loaded by path in the worker; a torch module is saved with
    ``torch.export`` and loaded there as an exported program. If a module cannot be exported it is
    measured in this process and ``method`` says so. ``threads`` goes to the runtime and to the
    worker's OMP_NUM_THREADS.
    """
    return measure_isolated_sets(runtime_name, artifact, [inputs], threads=threads, warmup=warmup, reps=reps,
                                 min_time_s=min_time_s, runtime_options=runtime_options, timeout_s=timeout_s,
                                 precision=precision)[0]


def measure_isolated_sets(runtime_name: str, artifact: Artifact, input_sets: list, *, threads: int | None,
                          warmup: int = 20, reps: int = 200, min_time_s: float = 0.0,
                          runtime_options: dict | None = None, timeout_s: float = 600,
                          precision: float = 0.0) -> list[IsolatedResult]:
    """``measure_isolated`` for several input sets (batch sizes) in one fresh process: the artifact is loaded once
    and each set timed in turn, in the order given (give ascending batch sizes, so each peak RSS is that batch's:
    the peak by the end of its timing). One process start and one load instead of one per batch size."""
    _check_counts(warmup, reps, min_time_s)
    check_precision(precision)
    if threads is not None and (int(threads) != threads or threads < 1):
        raise EdgesmithError(f"threads must be a whole number >= 1 or None, got {threads!r}.", "pass e.g. threads=2.")
    xs = [_as_inputs(inputs) for inputs in input_sets]
    opts = dict(runtime_options or {})
    try:
        json.dumps(opts)
    except (TypeError, ValueError):
        raise EdgesmithError("runtime_options must be JSON values to reach the measurement process.",
                             "pass numbers, strings, lists or dicts as runtime options.") from None
    what = f"{artifact.describe()} on {runtime_name}"
    with scratch_dir("bench") as tmp:
        workdir = Path(tmp)
        spec_artifact = {"format": artifact.format, "meta": _json_meta(artifact.meta)}
        if artifact.format == "torch":
            program = workdir / "module.pt2"
            why = _save_torch_program(artifact, xs[0], program)
            if why is not None:
                return _measure_here(runtime_name, artifact, xs, threads=threads, warmup=warmup, reps=reps,
                                     min_time_s=min_time_s, runtime_options=opts, why=why, precision=precision)
            spec_artifact["path"] = str(program)
        elif artifact.path is None:  # another in-memory model (a tree ensemble): its own save/load, by class
            module = artifact.module
            if not (callable(getattr(module, "save", None)) and callable(getattr(type(module), "load", None))):
                raise EdgesmithError(f"{artifact.describe()} cannot be sent to a measurement process.",
                                     "give the model class save(path) and a classmethod load(path).")
            saved = workdir / "module.npz"
            module.save(saved)
            spec_artifact["path"] = str(saved)
            spec_artifact["loader"] = f"{type(module).__module__}:{type(module).__qualname__}"
        else:
            spec_artifact["path"] = str(Path(artifact.path).resolve())
        method = METHOD_ISOLATED + (", torch.export program" if artifact.format == "torch" else "")
        write_json(workdir / "spec.json", {"runtime": runtime_name, "threads": threads, "runtime_options": opts,
                                           "warmup": int(warmup), "reps": int(reps), "min_time_s": float(min_time_s),
                                           "precision": float(precision), "method": method, "sets": len(xs),
                                           "artifact": spec_artifact})
        for i, x in enumerate(xs):
            np.savez(workdir / f"inputs{i}.npz", **(x if isinstance(x, dict) else {"": x}))
        _run_worker(workdir, threads, timeout_s * len(xs), what)
        results = []
        for i in range(len(xs)):
            result = json.loads((workdir / f"result{i}.json").read_text())
            memory = MemoryStats(artifact_size_bytes=artifact_size_bytes(artifact), **result["memory"])
            results.append(IsolatedResult(LatencyStats.from_dict(result["latency"]), memory,
                                          np.load(workdir / f"outputs{i}.npy"), isolated=True))
    return results
