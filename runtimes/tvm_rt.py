"""Apache TVM (Relax) on the host CPU: ONNX -> Relax -> llvm machine code for this CPU.

    rt = get_runtime("tvm", threads=2, tune_trials=0).load(onnx_artifact)
    rt.run(x)   # compiles for x.shape on first use, then reuses it

TVM compiles for static shapes, so a module is built per input shape (the batch of the first ``run``
call; another batch compiles again and is kept in memory). The target is ``llvm`` with this CPU's
name (``mcpu``, from LLVM's host detection) and ``num-cores`` = the thread count.

Untuned (``tune_trials=0``): Relax legalization and fusion, then TVM's dlight CPU rules (GEMV and
reductions). They do not cover batched matmul, so untuned code is slow at batch > 1.

Tuned (``tune_trials > 0``): MetaSchedule, with the pass sequence of
``relax.pipeline.static_shape_tuning_pipeline`` (decompose, canonicalize, zero pipeline, tune,
apply the database), but calling ``meta_schedule.relax_integration.tune_relax`` itself: the
pipeline's tuning pass takes no builder, seed or per-task budget, and its default builder imports
every backend's tensor intrinsics (about 50 s of CPU time) in each fresh build worker and gives up
after 30 s, so on a small or busy CPU every trial failed to build. Here the builder skips that
import, the tuning process loads only the CPU intrinsics, and the budget is split over the
kernels. Kernels with no valid trial keep the untuned dlight schedule (``tuned_kernels`` in the
stats counts the others). Tuning times real kernels, so two tunes may differ despite the seed.

Tuning records (``records=True``, with ``tune_trials=0``): no fresh tuning; the schedules MetaSchedule
found earlier are applied from the records shipped in ``runtimes/tvm_records/`` (tuned here for the
demo's models) and from those every fresh tune adds to ``cache_dir() / "tvm" / "records"``. Records
match kernels by structure (shapes and dtypes, not weights) and target; a model none of whose
kernels has a record is refused (``tuned_kernels`` 0 would only repeat the untuned row).

Compiled libraries are cached on disk (``cache_dir() / "tvm"``), keyed by the ONNX bytes, input
shape, target, trial count, the records applied and TVM version, so another process loads them instead of recompiling
or retuning; a damaged entry is rebuilt. A JSON sidecar keeps what the compile did. Run stats:
``compile_s`` (seconds this process spent compiling, and tuning, the module that served the call;
0 when it came from the disk cache), ``cache_hit``, ``tune_trials``, ``target``, ``threads``,
``batch``, ``kernels`` and ``tuned_kernels``.

Threads (``threads``, else ``TVM_NUM_THREADS``, else every usable core): TVM's pool is per calling
thread, sized from ``TVM_NUM_THREADS`` when first used and never grown afterwards; each launch
reads the variable again (1 means serial). ``run`` starts the pool with all cores, sets the
variable for the call and picks the thread count with ``runtime.config_threadpool``; ``threads``
in the stats is what the pool reports. ``TVM_BIND_THREADS`` defaults to 0 here: with binding on,
TVM pins the calling thread to core 0 when it uses one thread, and threads the process starts
afterwards (torch, onnxruntime) inherit that pin.

A ``TvmRuntime`` is not safe to call from several threads at once (like TVM's VM it holds state
per call: the staged input).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError, atomic_path, cache_dir, quiet_native_output, write_json
from edgesmith.runtimes.base import Runtime, register_runtime

_CACHE_VERSION = 1  # bump when what goes into a cached library changes
_TUNE_SEED = 0
_BUILD_TIMEOUT_S = 300.0  # per MetaSchedule build batch; generous because small CPUs are slow
_RUN_TIMEOUT_S = 120.0
_OPTIONS = ("tune_trials", "records", "compile_timeout_s")
SHIPPED_RECORDS = Path(__file__).resolve().parent / "tvm_records"
_RECORD_FILES = ("database_workload.json", "database_tuning_record.json")
_USE_ONNXRUNTIME = ("run this model with the onnxruntime runtime instead (--runtime onnxruntime); "
                    "it runs every standard ONNX operator and onnxruntime's com.microsoft ones.")


class _Compiled:
    """A loaded module for one input shape, what it cost to get it, and its input buffer.

    The input is staged in a 64-byte-aligned NumPy array that a TVM tensor shares (zero-copy
    DLPack), so a call copies ``x`` with NumPy instead of allocating a TVM tensor: at batch 1 that
    allocation costs about twice the kernels' own time.
    """

    def __init__(self, executable, shape: tuple[int, ...], *, compile_s: float, cache_hit: bool,
                 kernels: int | None, tuned_kernels: int | None, path: Path, dtype: np.dtype):
        import tvm
        from tvm import relax

        self.main = relax.VirtualMachine(executable, tvm.cpu())["main"]
        self.x_host = _aligned_empty(shape, dtype)  # the graph's input type (token ids are int64)
        self.x_device = tvm.runtime.from_dlpack(self.x_host)
        self.compile_s, self.cache_hit, self.path = compile_s, cache_hit, path
        self.kernels, self.tuned_kernels = kernels, tuned_kernels

    def __call__(self, x: np.ndarray) -> np.ndarray:
        import tvm

        np.copyto(self.x_host, x)
        out = self.main(self.x_device)
        out = out if isinstance(out, tvm.runtime.Tensor) else out[0]
        return np.from_dlpack(out).copy()  # the view is read-only and TVM owns its memory


def _aligned_empty(shape: tuple[int, ...], dtype, align: int = 64) -> np.ndarray:
    """An uninitialised array whose data starts on an ``align``-byte boundary (TVM's DLPack import needs 64)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + nbytes].view(dtype).reshape(shape)


@register_runtime
class TvmRuntime(Runtime):
    name = "tvm"
    contract_fixture = "mlp-onnx"
    formats = ("onnx",)
    description = "Apache TVM Relax compiled for this CPU (llvm), untuned or MetaSchedule-tuned"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if importlib.util.find_spec("tvm") is None:
            return False, ("apache-tvm is not installed. Fix: "
                           "pip install apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1.")
        return True, ""

    def _load(self, artifact: Artifact) -> None:
        self.tune_trials_ = _checked_tune_trials(self.options)
        default_limit = 300.0 + 5.0 * self.tune_trials_  # untuned compiles of small graphs take seconds
        self.compile_timeout_s_ = float(self.options.get("compile_timeout_s", default_limit))
        if not self.compile_timeout_s_ > 0:
            raise EdgesmithError(f"tvm: compile_timeout_s is {self.compile_timeout_s_!r}.", "use a positive number of seconds.")
        self.records_ = bool(self.options.get("records", False)) and self.tune_trials_ == 0
        self.threads_ = _resolve_threads(self.threads)
        os.environ.setdefault("TVM_BIND_THREADS", "0")  # before TVM starts its pool; see module docstring
        import onnx
        import tvm

        if not tvm.runtime.enabled("llvm"):
            raise EdgesmithError("this TVM build has no llvm backend, so it cannot compile for the CPU.",
                                 "install the apache-tvm wheel from PyPI, which includes llvm.")
        data = artifact.path.read_bytes()
        try:
            model = onnx.load_from_string(data)
        except Exception as e:  # protobuf raises several types for a damaged file
            raise EdgesmithError(f"{artifact.path} is not a readable ONNX model ({type(e).__name__}).",
                                 "re-export the model.") from None
        unsupported = _unsupported_ops(model)
        if unsupported:
            raise _unsupported_error(artifact.path, unsupported)
        self.input_name_, self.input_dtype_ = _graph_input(model, artifact.path)
        self.model_ = model
        self.digest_ = hashlib.sha256(data).hexdigest()
        self.target_ = host_target(self.threads_)
        self.modules_: dict[tuple[int, ...], _Compiled] = {}

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        used, prev_env = _use_threads(self.threads_)
        try:
            compiled = self.modules_.get(x.shape)
            if compiled is None:
                compiled = self.modules_[x.shape] = self._compile_or_load(x.shape)
            out = compiled(x)
        finally:
            _restore_env(prev_env)
        stats = {
            "threads": used,
            "target": str(self.target_),
            "tune_trials": self.tune_trials_,
            "records": self.records_,
            "compile_s": compiled.compile_s,
            "cache_hit": compiled.cache_hit,
            "batch": int(x.shape[0]),
            "kernels": compiled.kernels,
            "tuned_kernels": compiled.tuned_kernels,
        }
        return out, stats

    def _compile_or_load(self, shape: tuple[int, ...]) -> _Compiled:
        """The module for ``shape``: from the disk cache if there, else compiled (and tuned) now."""

        lib_path = self._cache_path(shape)
        meta_path = lib_path.with_suffix(".json")
        if lib_path.exists():
            try:
                lib = _load_library(lib_path)
            except Exception:  # a damaged entry (e.g. from another TVM build) is rebuilt below
                pass
            else:
                meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
                return _Compiled(lib, shape, compile_s=0.0, cache_hit=True, kernels=meta.get("kernels"),
                                 tuned_kernels=meta.get("tuned_kernels"), path=lib_path, dtype=self.input_dtype_)
        t0 = time.perf_counter()
        self._compile_in_child(shape, lib_path, meta_path)
        compile_s = time.perf_counter() - t0
        meta = json.loads(meta_path.read_text())
        return _Compiled(_load_library(lib_path), shape, compile_s=compile_s, cache_hit=False,
                         kernels=meta.get("kernels"), tuned_kernels=meta.get("tuned_kernels"), path=lib_path,
                         dtype=self.input_dtype_)

    def _compile_in_child(self, shape, lib_path: Path, meta_path: Path) -> None:
        """Compile (and tune) in a child process that writes the cache entry, showing the time spent, and
        stop it after ``compile_timeout_s``: a graph TVM takes forever on is a clear error, not a hang."""
        import multiprocessing as mp

        from tqdm.auto import tqdm

        timeout = self.compile_timeout_s_
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["tvm", "onnx", "edgesmith.runtimes.tvm_rt"])  # later compiles fork ready
        err = lib_path.with_suffix(".error.json")
        err.unlink(missing_ok=True)
        job = ctx.Process(target=_compile_job, daemon=True,
                          args=(self.artifact_.path.read_bytes(), self.input_name_, tuple(shape), self.threads_,
                                self.tune_trials_, self.records_, str(self.artifact_.path), str(lib_path),
                                str(meta_path), str(err)))
        job.start()
        label = f"tvm compile b{shape[0]}" + (f" + tune {self.tune_trials_}" if self.tune_trials_ else "")
        with tqdm(desc=label, bar_format="{desc}: {elapsed} (limit " + f"{timeout:.0f} s)", leave=False,
                  disable=not sys.stderr.isatty()) as bar:
            t0 = time.perf_counter()
            while job.is_alive() and time.perf_counter() - t0 < timeout:
                job.join(1.0)
                bar.update(0)
        if job.is_alive():
            job.kill()
            job.join()
            raise EdgesmithError(f"TVM did not compile {self.artifact_.path} (batch {shape[0]}) within {timeout:.0f} s.",
                                 "run this model with onnxruntime (--no-tvm), or raise the limit with the tvm "
                                 "runtime option compile_timeout_s.")
        if err.exists():
            e = json.loads(err.read_text())
            err.unlink(missing_ok=True)
            raise EdgesmithError(e["problem"], e.get("fix"))
        if job.exitcode != 0 or not lib_path.exists():
            raise EdgesmithError(f"the TVM compile process for {self.artifact_.path} died (exit code {job.exitcode}).",
                                 _USE_ONNXRUNTIME)

    def _cache_path(self, shape: tuple[int, ...]) -> Path:
        import tvm

        key = json.dumps({"v": _CACHE_VERSION, "onnx": self.digest_, "input": self.input_name_, "shape": list(shape),
                          "target": str(self.target_), "tune_trials": self.tune_trials_, "tvm": tvm.__version__,
                          "records": records_digest() if self.records_ else None}, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        tuned = f"t{self.tune_trials_}" if self.tune_trials_ else ("records" if self.records_ else "untuned")
        return cache_dir() / "tvm" / f"{self.artifact_.path.stem}-b{shape[0]}-{tuned}-{digest}.so"


# --- compiling ---------------------------------------------------------------------------------------


def _load_library(path: Path):
    """Load a cached library through a private copy: the dynamic loader hands back an earlier handle for a
    path it has seen, so a cache entry rebuilt in this process would otherwise never be read again."""
    import shutil

    import tvm

    fd, tmp = tempfile.mkstemp(prefix=".load-", suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        shutil.copyfile(path, tmp)
        return tvm.runtime.load_module(tmp)
    finally:
        os.unlink(tmp)  # the mapping outlives the name


def _compile_job(onnx_bytes: bytes, input_name: str, shape, threads: int, tune_trials: int, records: bool, what: str,
                 lib_path: str, meta_path: str, err_path: str) -> None:
    """The child process of ``TvmRuntime._compile_in_child``: compile, write the cache entry atomically."""
    import onnx
    import tvm

    from edgesmith.common import die_with_parent

    die_with_parent()  # its parent is the fork server, which ends when the process that asked ends
    try:
        model = onnx.load_from_string(onnx_bytes)
        target = host_target(threads)
        t0 = time.perf_counter()
        ex, kernels, tuned = build_module(model, input_name, tuple(shape), target, tune_trials, what=what,
                                          records=records)
        compile_s = time.perf_counter() - t0
        with atomic_path(Path(lib_path), force=True) as tmp:
            ex.export_library(str(tmp))
        write_json(meta_path, {"onnx": what, "onnx_sha256": hashlib.sha256(onnx_bytes).hexdigest(), "shape": list(shape),
                               "target": str(target), "tune_trials": tune_trials, "records": records,
                               "tvm": tvm.__version__, "compile_s": compile_s, "kernels": kernels,
                               "tuned_kernels": tuned})
    except EdgesmithError as e:
        write_json(err_path, {"problem": e.problem, "fix": e.fix})


def host_target(threads: int):
    """``llvm`` for this CPU: its LLVM name as ``mcpu`` (none if LLVM does not know it), ``threads`` cores."""
    from tvm.target import Target, codegen

    spec: dict[str, Any] = {"kind": "llvm", "num-cores": int(threads)}
    try:
        cpu = str(codegen.llvm_get_system_cpu())
    except Exception:  # older or stripped builds lack the helper: generic x86-64/aarch64 code still runs
        cpu = ""
    if cpu and cpu != "generic":
        spec["mcpu"] = cpu
    return Target(spec)


def build_module(model, input_name: str, shape: tuple[int, ...], target, tune_trials: int, *, what: str = "the model",
                 records: bool = False):
    """Import ``model`` for ``shape``, schedule it (tuned, from tuning records, or not) and compile it.

    Returns the executable, the number of TIR kernels and how many of them got a tuned schedule.
    Import and compile failures become ``EdgesmithError``s that point to onnxruntime.
    """
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir import dlight

    failure = None
    with quiet_native_output((1, 2)):  # a failed conversion prints the operator and warns from C++ as it unwinds
        try:
            mod = from_onnx(model, shape_dict={input_name: list(shape)}, keep_params_in_input=False)
        except tvm.error.OpNotImplemented as e:
            failure = _unsupported_error(what, _ops_from_message(str(e)))
        except Exception as e:  # converters raise anything from KeyError to TVMError on what they cannot map
            failure = EdgesmithError(f"TVM's ONNX importer failed on {what}: {_first_line(e)}", _USE_ONNXRUNTIME)
    if failure is not None:  # raised here, once the importer's frames (and their C++ objects) are gone
        raise failure
    try:
        with target:
            mod = tvm.transform.Sequential([
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.get_pipeline("zero"),
            ])(mod)
        if tune_trials > 0:
            mod = _tune(mod, target, tune_trials)
        elif records:
            mod = _apply_records(mod, target)
        kernels = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
        n_tuned = sum(bool(f.attrs and f.attrs.get("tirx.is_scheduled")) for f in kernels)
        if records and tune_trials == 0 and n_tuned == 0:
            raise EdgesmithError(f"no TVM tuning record matches a kernel of {what} on {target}.",
                                 "tune it once with --tvm-tune-trials N (the records are then cached for later runs), "
                                 "or leave the records row out.")
        with target:
            mod = dlight.ApplyDefaultSchedule(dlight.cpu.GEMV(), dlight.cpu.Reduction())(mod)
        ex = tvm.compile(mod, target=target)
    except EdgesmithError:
        raise
    except Exception as e:
        raise EdgesmithError(f"TVM could not compile {what} for {target}: {_first_line(e)}", _USE_ONNXRUNTIME) from e
    return ex, len(kernels), n_tuned


def _tune(mod, target, trials: int):
    """MetaSchedule-tune every kernel of ``mod`` (already fused) and apply the best schedules found.

    The budget is split evenly over the kernels, so a small trial count still reaches all of them.
    """
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    missing = [m for m in ("psutil", "xgboost") if importlib.util.find_spec(m) is None]
    if missing:
        raise EdgesmithError(f"MetaSchedule tuning needs {' and '.join(missing)}, which is not installed.",
                             f"pip install {' '.join(missing)} (xgboost-cpu avoids a CUDA download), "
                             "or use tune_trials=0.")
    tasks = ms.relax_integration.extract_tasks(mod, target)
    if not tasks:
        return mod
    per_task = max(1, math.ceil(trials / len(tasks)))
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    level = ms_logger.level
    ms_logger.setLevel(logging.WARNING)  # the console handler copies this level; the full log goes to files
    (cache_dir() / "tvm").mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="tune-", dir=cache_dir() / "tvm") as work_dir:
            with _cpu_tensor_intrinsics_only():
                ms.relax_integration.tune_relax(
                    mod, {}, target, work_dir, trials, max_trials_per_task=per_task, num_trials_per_iter=per_task,
                    builder=ms.builder.LocalBuilder(f_build=_light_build_fn(), timeout_sec=_BUILD_TIMEOUT_S),
                    runner=ms.runner.LocalRunner(timeout_sec=_RUN_TIMEOUT_S), seed=_TUNE_SEED)
            _save_records(work_dir)
            with target:
                return relax.transform.MetaScheduleApplyDatabase(work_dir)(mod)
    finally:
        ms_logger.setLevel(level)


def record_dirs() -> list[Path]:
    """Tuning-record databases to apply: the shipped one, then the cache's (each only if it has records)."""
    dirs = [SHIPPED_RECORDS, cache_dir() / "tvm" / "records"]
    return [d for d in dirs if all((d / f).is_file() and (d / f).stat().st_size for f in _RECORD_FILES)]


def records_digest() -> str:
    """A hash of every record database's bytes: compiled libraries depend on the records applied."""
    h = hashlib.sha256()
    for d in record_dirs():
        for f in _RECORD_FILES:
            h.update((d / f).read_bytes())
    return h.hexdigest()[:16]


def _apply_records(mod, target):
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    dbs = [ms.database.JSONDatabase(work_dir=str(d), allow_missing=False) for d in record_dirs()]
    if not dbs:
        return mod
    db = dbs[0] if len(dbs) == 1 else ms.database.UnionDatabase(*dbs)
    with target, db:
        return relax.transform.MetaScheduleApplyDatabase()(mod)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (processes sharing a cache take turns)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _save_records(work_dir: str) -> None:
    """Add a fresh tune's records to the cache's database, so ``records=True`` runs reuse them."""
    from tvm.s_tir import meta_schedule as ms

    src = ms.database.JSONDatabase(work_dir=work_dir, allow_missing=False)
    dst_dir = cache_dir() / "tvm" / "records"
    with _locked(dst_dir / ".lock"):
        dst = ms.database.JSONDatabase(work_dir=str(dst_dir), allow_missing=True)
        for rec in src.get_all_tuning_records():
            wl = dst.commit_workload(rec.workload.mod)
            dst.commit_tuning_record(ms.database.TuningRecord(rec.trace, wl, rec.run_secs, rec.target, rec.args_info))


@contextlib.contextmanager
def _cpu_tensor_intrinsics_only() -> Iterator[None]:
    """While tuning, let MetaSchedule's ``import tvm.s_tir.tensor_intrin`` load only the CPU intrinsics.

    That package's ``__init__`` registers every backend's tensor intrinsics; the CUDA, ROCm and
    Hexagon ones take about 50 s of CPU time (80 s wall on a busy 2-core VM), most of a small
    tune, and cannot apply to an llvm target. While the block runs, the package sits in
    ``sys.modules`` with just its x86, ARM and RISC-V modules; afterwards it is removed, so a later
    plain import runs ``__init__`` and registers the rest (modules already loaded are reused, not
    registered twice).
    """
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:  # already imported in full: nothing to save
        yield
        return
    sys.modules[name] = importlib.util.module_from_spec(importlib.util.find_spec(name))
    try:
        for cpu in ("x86", "arm_cpu", "riscv_cpu"):
            importlib.import_module(f"{name}.{cpu}")
        yield
    finally:
        sys.modules.pop(name, None)


def _light_build_fn():
    """A MetaSchedule build function that skips importing all tensor intrinsics in the worker.

    It is MetaSchedule's default build minus ``import tvm.s_tir.tensor_intrin``: a tuned candidate
    arrives already scheduled (tensorized blocks hold their intrinsic's body), so the worker needs
    no registry. Defined in a function so cloudpickle sends it by value and the worker does not
    have to import edgesmith.
    """

    def build(mod, target, _params):
        from tvm.driver import build as tvm_build
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)

    return build


# --- checks and helpers ------------------------------------------------------------------------------


def _checked_tune_trials(options: dict) -> int:
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise EdgesmithError(f"runtime 'tvm' has no option(s) {', '.join(unknown)}.",
                             f"valid options: {', '.join(_OPTIONS)}.")
    if not isinstance(options.get("records", False), bool):
        raise EdgesmithError(f"tvm: records is {options['records']!r}.", "use true or false.")
    n = options.get("tune_trials", 0)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise EdgesmithError(f"tvm: tune_trials is {n!r}.",
                             "use a whole number >= 0 (0 = untuned; 32 or more for a useful tune).")
    return int(n)


def _resolve_threads(threads) -> int:
    """The thread count to compile for and run with: ``threads``, else TVM_NUM_THREADS, else all usable cores.

    TVM's own default is half the logical cores (it assumes hyper-threading), which on a small VM
    leaves cores idle while the other backends use them all.
    """
    if threads is None:
        env = os.environ.get("TVM_NUM_THREADS", "")
        threads = int(env) if env.isdigit() and int(env) > 0 else len(os.sched_getaffinity(0))
    if isinstance(threads, bool) or int(threads) != threads or int(threads) < 1:
        raise EdgesmithError(f"tvm: threads is {threads!r}.", "use a whole number >= 1, or leave it unset.")
    return int(threads)


_POOL = threading.local()  # whether this thread's TVM pool was started here


def _use_threads(n: int) -> tuple[int, str | None]:
    """Make TVM kernels on this thread use ``n`` threads; returns the pool size in use and the
    previous ``TVM_NUM_THREADS`` for ``_restore_env`` (a plain pair: this runs on every call)."""
    import tvm

    prev = os.environ.get("TVM_NUM_THREADS")
    if not getattr(_POOL, "started", False):
        # A thread's pool is sized once, when first used, and can only shrink afterwards: start
        # it with every usable core so a later runtime in this thread can still ask for more.
        os.environ["TVM_NUM_THREADS"] = str(max(n, len(os.sched_getaffinity(0))))
        tvm.runtime.num_threads()
        _POOL.started = True
    os.environ["TVM_NUM_THREADS"] = str(n)  # read at each launch: 1 runs kernels serially
    used = tvm.runtime.num_threads()
    if used != n:
        tvm.get_global_func("runtime.config_threadpool")(1, n)  # 1: "big" cores, i.e. all on x86
        used = tvm.runtime.num_threads()
    return int(used), prev


def _restore_env(prev: str | None) -> None:
    if prev is None:
        os.environ.pop("TVM_NUM_THREADS", None)
    else:
        os.environ["TVM_NUM_THREADS"] = prev


def _unsupported_ops(model) -> list[str]:
    """Operators of the main graph that TVM's ONNX importer has no converter for ("domain.op" if not ONNX's)."""
    try:
        from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

        known = set(_get_convert_map()) | {"Constant", "If"}  # the two the importer handles itself
    except Exception:  # a private helper: without it the importer's own check still names the ops
        return []
    return sorted({_op_name(n) for n in model.graph.node if n.op_type not in known})


def _op_name(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _ops_from_message(msg: str) -> list[str]:
    tail = msg.split(":", 1)[-1] if ":" in msg else msg
    return sorted({p.strip() for p in tail.strip().splitlines()[0].split(",") if p.strip()})


def _unsupported_error(what, ops: list[str]) -> EdgesmithError:
    return EdgesmithError(
        f"TVM's ONNX importer does not support operator(s) {', '.join(ops)} used by {what}.",
        _USE_ONNXRUNTIME,
    )


def _graph_input(model, path) -> tuple[str, np.dtype]:
    """The name and numpy type of the model's one data input (the tvm runtime feeds one tensor)."""
    from edgesmith.compress.onnx_analysis import data_inputs

    inputs = data_inputs(model)
    if len(inputs) != 1:
        raise EdgesmithError(f"{path} has {len(inputs)} inputs ({', '.join(n for n, _, _ in inputs)}); the tvm "
                             "runtime feeds one.", "export the model with a single input tensor.")
    name, dtype, _ = inputs[0]
    return name, dtype


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.startswith((" ", "Traceback"))]
    return (lines[0] if lines else type(e).__name__)[:300]
