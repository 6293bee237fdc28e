"""Shared plumbing for every edgesmith package: the user-error type, safe writes, seeding, the config
base and cache-or-train.

It sits at the root of the ``edgesmith`` namespace, outside the five packages of the data flow
(models -> compress -> hardware -> runtimes -> bench), so every one of them may import it without the
flow turning back. It imports nothing heavy: a latency worker that only times onnxruntime loads it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np


class EdgesmithError(Exception):
    """A problem the user can fix. The CLI prints it as one line (problem + fix) and exits non-zero.

    ``fix`` says what to do about it; keep both parts short and concrete.
    """

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem} Fix: {fix}")


class Interrupted(EdgesmithError):
    """Ctrl-C, where work that finished is kept: the message says what was kept (exit status 130, as for SIGINT)."""

    exit_code = 130


class NoEvaluationData(EdgesmithError):
    """A user's model was given no data to score on: ``quantize`` still writes its file and says why it is unscored."""


def raised(e: BaseException, limit: int = 200) -> str:
    """What the user's code raised, as ``Type: first line`` (``SystemExit(3)`` for a ``sys.exit(3)``)."""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r})"
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:limit]}" if lines else type(e).__name__


def import_modules(names) -> None:
    """Import each named module once: how the registries load their entries on first use."""
    import importlib

    for name in names:
        importlib.import_module(name)


MAX_SEED = 2**63 - 1  # torch.manual_seed takes 64 bits; a wider seed would fail deep inside a run


def check_seed(seed, name: str = "seed") -> int:
    """A seed is a whole number from 0 to ``MAX_SEED``: one error naming it otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise EdgesmithError(f"{name} is {seed!r}.", f"use a whole number from 0 to {MAX_SEED} (2**63 - 1).")
    return seed


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and torch (if imported) and return a NumPy generator for local use."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a hard dependency of the main env
        pass
    return np.random.default_rng(seed)


OUTPUT_MARKER = ".edgesmith-output"  # written into every folder edgesmith writes: --force may replace only those
# what folders edgesmith wrote before the marker existed hold: they may be replaced too
_OUR_FILES = ("report.json", "summary.json", "table.json", "sweep.json")
_WRITE_ERRNOS = {errno.ENOSPC: ("the disk is full", "free some space (or write elsewhere) and run it again"),
                 errno.EDQUOT: ("the disk quota is exhausted", "free some space (or write elsewhere) and run it again"),
                 errno.EACCES: ("permission was denied", "choose a folder you can write to"),
                 errno.EPERM: ("the operation is not permitted", "choose a folder you can write to"),
                 errno.EROFS: ("the file system is read-only", "choose a folder on a writable disk"),
                 errno.ENOTDIR: ("a folder in the path is a file", "choose a path whose folders are folders"),
                 errno.ENAMETOOLONG: ("the file name is too long", "use a name of at most 255 bytes"),
                 errno.EFBIG: ("the file is larger than the file-size limit (ulimit -f)",
                               "raise the limit (ulimit -f unlimited) or write a smaller model")}
NAME_MAX = 255  # bytes in one path component on Linux file systems


def written_by_edgesmith(folder: Path) -> bool:
    return folder.is_dir() and any((folder / f).is_file() for f in (OUTPUT_MARKER, *_OUR_FILES))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def sweep_stale_temps(final: Path) -> int:
    """Remove ``.NAME.PID.*.tmp`` leftovers beside ``final`` whose process is gone (a SIGKILL leaves them)."""
    removed = 0
    try:
        entries = list(final.parent.glob(f".{final.name}.*.tmp"))
    except OSError:
        return 0
    for entry in entries:
        parts = entry.name[len(final.name) + 2:].split(".")
        if parts and parts[0].isdigit() and not _pid_alive(int(parts[0])):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


SCRATCH = "edgesmith-"  # scratch folders in $TMPDIR: edgesmith-WHAT.PID.RANDOM


def sweep_stale_scratch() -> int:
    """Remove this user's ``$TMPDIR/edgesmith-WHAT.PID.*`` scratch folders whose process is gone (a killed run)."""
    removed = 0
    try:
        entries = list(Path(tempfile.gettempdir()).glob(SCRATCH + "*.*.*"))
    except OSError:
        return 0
    for entry in entries:
        pid = entry.name.split(".")[1]
        try:
            mine = entry.lstat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


@contextlib.contextmanager
def scratch_dir(what: str, dir: str | os.PathLike | None = None) -> Iterator[Path]:
    """A temporary folder named for this process (``edgesmith-WHAT.PID.*``, in ``dir`` or ``$TMPDIR``), removed when
    the block ends; those a killed run left are swept first, so they never pile up."""
    if dir is None:
        sweep_stale_scratch()
    path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH}{what}.{os.getpid()}.", dir=dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def check_output(final: str | os.PathLike, *, force: bool, folder: bool) -> None:
    """Refuse an output path before any work: a folder on its way that is a file, a name too long for the file
    system; it exists without ``force``; or ``force`` would replace what edgesmith must not (anything but a regular
    file or a folder edgesmith wrote: a special file, a link, a folder with a file, a file with a folder)."""
    final = Path(final)
    check_output_path(final)
    if not (final.exists() or final.is_symlink()):
        return
    if not force:
        _refuse_existing(final)
    _check_replaceable(final, folder)


def check_output_path(final: Path) -> None:
    """The parts of an output path that fail at the write, checked before the work: each component fits the file
    system, and no existing folder on the way is a file."""
    for part in final.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise EdgesmithError(f"the output name {part[:40]}... is {len(os.fsencode(part))} bytes; file systems "
                                 f"take at most {NAME_MAX}.", "choose a shorter output name.")
    for parent in final.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise EdgesmithError(f"{parent} is a file, so {final} cannot be written inside it.",
                                     "choose an output path whose folders are folders.")
            break


def _special_kind(mode: int) -> str | None:
    """What a file of ``mode`` (from stat or lstat) is when it is neither a regular file nor a folder."""
    import stat

    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


def _special(final: Path) -> str | None:
    """What ``final`` is when it is neither a regular file nor a folder (lstat: a link is not followed)."""
    try:
        return _special_kind(os.lstat(final).st_mode)
    except FileNotFoundError:
        return None


def regular_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` when it is a regular file (a link to one is fine): a missing path, a folder or a special file (a FIFO
    would block the read forever, a device would never end) is one error naming it."""
    import stat

    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise EdgesmithError(f"{what} {path} does not exist.", "check the path.") from None
    except OSError as e:
        raise EdgesmithError(f"{what} {path} cannot be read ({e.strerror}).", "check the path.") from None
    if stat.S_ISDIR(mode):
        raise EdgesmithError(f"{what} {path} is a folder, not a file.", "give the file itself.")
    if not stat.S_ISREG(mode):
        kind = _special_kind(mode) or "a special file"
        raise EdgesmithError(f"{what} {path} is {kind}, not a regular file; edgesmith reads only regular files.",
                             "save the data to a file first and give that.")
    return path


def _check_replaceable(final: Path, folder: bool) -> None:
    """``final`` exists and ``force`` was given: only a regular file (for a file) or a folder edgesmith wrote (for a
    folder) may be replaced."""
    special = _special(final)
    if special:
        raise EdgesmithError(f"{final} is {special}; --force replaces only regular files and folders edgesmith "
                             "wrote.", "choose another output path.")
    if folder and not final.is_dir():
        raise EdgesmithError(f"{final} is a file; edgesmith never replaces a file with a folder.",
                             "choose another output folder.")
    if not folder and final.is_dir():
        raise EdgesmithError(f"{final} is a folder; edgesmith never writes a file over a folder.",
                             "choose another output path (a file name).")
    if folder and not written_by_edgesmith(final):
        raise EdgesmithError(f"{final} is a folder edgesmith did not write; --force replaces only folders it wrote.",
                             "choose another output folder, or move that one away yourself.")


def _refuse_existing(final: Path) -> None:
    raise EdgesmithError(f"{final} already exists and would be overwritten.",
                         "choose another output path or pass --force to replace it.")


def _place_file(tmp: Path, final: Path, force: bool) -> None:
    if final.exists() or final.is_symlink():
        if not force:
            _refuse_existing(final)
        _check_replaceable(final, folder=False)
    if force:
        os.replace(tmp, final)  # one atomic step: there is never a moment without a complete file
        return
    try:
        os.link(tmp, final)  # fails if final appeared meanwhile: two writers cannot both succeed
    except FileExistsError:
        _refuse_existing(final)
    except OSError:  # a file system without hard links: check, then rename (a small window remains)
        if final.exists() or final.is_symlink():
            _refuse_existing(final)
        os.replace(tmp, final)


def _place_dir(tmp: Path, final: Path, force: bool, aside: Path) -> None:
    (tmp / OUTPUT_MARKER).write_text(json.dumps({"written_by": "edgesmith", "pid": os.getpid()}) + "\n")
    if final.exists() or final.is_symlink():
        if not force:
            _refuse_existing(final)
        _check_replaceable(final, folder=True)
        os.rename(final, aside)  # atomic; the old folder is deleted only once the new one is in place
        os.rename(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
        return
    try:
        os.rename(tmp, final)
    except OSError:  # ENOTEMPTY / EEXIST: another writer got there first
        if final.exists():
            _refuse_existing(final)
        raise


def environment_error(e: OSError, final: Path) -> EdgesmithError | None:
    """A user-fixable OSError while writing ``final`` (disk full, no permission, read-only) as a clear error."""
    known = _WRITE_ERRNOS.get(e.errno)
    if known is None:
        return None
    return EdgesmithError(f"could not write {final}: {known[0]} ({e.strerror}).", f"{known[1]}; nothing was left behind.")


@contextlib.contextmanager
def quiet_native_output(fds: tuple[int, ...] = (1,)) -> Iterator[None]:
    """Send what is written to file descriptors ``fds`` (1: stdout, 2: stderr) while the block runs to /dev/null:
    C++ logging that ``contextlib.redirect_stdout`` cannot reach, and Python prints too (flushed before the
    descriptors come back). torch's legacy ONNX exporter dumps its whole graph to stdout when an operator fails (torch
    2.13's ``setup_onnx_logging`` tests a function object instead of calling it); TVM's ONNX importer prints the
    operator it could not convert and logs a C++ warning to stderr; both failures are reported as errors anyway."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(fd) for fd in fds]
    try:
        with open(os.devnull, "w") as null:
            for fd in fds:
                os.dup2(null.fileno(), fd)
            yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, copy in zip(fds, saved):
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success move it into place atomically.

    Works for files and folders alike: whatever the caller creates at the yielded path reaches ``final``
    only if the block finishes, so a crash never leaves a half-written artifact. An existing ``final`` is
    replaced only with ``force=True``, and even then a file never replaces a folder and a folder only
    replaces a folder edgesmith wrote (it carries ``.edgesmith-output``). Files are placed with
    ``os.replace`` (forced) or ``os.link`` (not forced), so concurrent writers never see a missing file and
    two unforced writers cannot both succeed. Temporary folders are ``.NAME.PID.*.tmp``; those of dead
    processes are swept on the next write. A full disk or a folder without write permission is an
    ``EdgesmithError``.
    """
    final = Path(final)
    check_output_path(final)
    sweep_stale_temps(final)
    if (final.exists() or final.is_symlink()) and not force:
        _refuse_existing(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{final.name}.{os.getpid()}.", suffix=".tmp", dir=final.parent))
    except OSError as e:
        err = environment_error(e, final)
        if err is None:
            raise
        raise err from None
    tmp = tmp_dir / final.name
    try:
        yield tmp
        if not tmp.exists():
            raise RuntimeError(f"nothing was written to the temporary path for {final}")
        if tmp.is_dir():
            _place_dir(tmp, final, force, tmp_dir / ".old")
        else:
            _place_file(tmp, final, force)
    except OSError as e:
        err = environment_error(e, final)
        if err is None:
            raise
        raise err from None
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


@contextlib.contextmanager
def atomic_files(finals, *, force: bool = False) -> Iterator[list[Path]]:
    """Like ``atomic_path`` for several files in one folder that belong together (a model and its report):
    all are written to temporary paths first, then placed one after another; if a placement fails, the
    ones already placed are removed again, so they arrive together or not at all."""
    finals = [Path(f) for f in finals]
    if len({f.parent for f in finals}) != 1:
        raise ValueError("atomic_files takes files of one folder")
    for f in finals:
        check_output_path(f)
        sweep_stale_temps(f)
        if (f.exists() or f.is_symlink()) and not force:
            _refuse_existing(f)
    try:
        finals[0].parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{finals[0].name}.{os.getpid()}.", suffix=".tmp",
                                        dir=finals[0].parent))
    except OSError as e:
        err = environment_error(e, finals[0])
        if err is None:
            raise
        raise err from None
    tmps = [tmp_dir / f"{i}-{f.name}" for i, f in enumerate(finals)]
    try:
        yield tmps
        placed = []
        try:
            for tmp, final in zip(tmps, finals):
                if tmp.exists():  # an optional member (a sidecar) may not have been written
                    _place_file(tmp, final, force)
                    placed.append(final)
        except BaseException:
            for f in placed:
                f.unlink(missing_ok=True)
            raise
    except OSError as e:
        err = environment_error(e, finals[0])
        if err is None:
            raise
        raise err from None
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def write_json(path: str | os.PathLike, obj: Any, *, force: bool = True) -> Path:
    """Write JSON atomically (temp file + rename)."""
    path = Path(path)
    with atomic_path(path, force=force) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def check_finite_array(x: np.ndarray, what: str) -> np.ndarray:
    """Reject empty or non-finite arrays with a clear message (used for calibration and inputs)."""
    x = np.asarray(x)
    if x.size == 0 or (x.ndim >= 1 and x.shape[0] == 0):
        raise EdgesmithError(f"{what} is empty.", f"provide at least one sample of {what}.")
    if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise EdgesmithError(
            f"{what} contains {bad} NaN or infinite values.",
            f"clean or re-generate {what}; every value must be finite.",
        )
    return x


SOURCE_ROOT = Path(__file__).resolve().parent  # the checkout (or the installed package folder)
# trained weights that ship with the repository, named as their cache entries (``cache_dir()/models/NAME``):
# a cache miss loads them instead of training; see models/weights/README.md for how each was made
SHIPPED_WEIGHTS = SOURCE_ROOT / "models" / "weights"


def cache_dir() -> Path:
    """Where trained models and compiled kernels are cached: ``$EDGESMITH_CACHE``, else ``.cache`` in a
    source checkout (the folder holding pyproject.toml), else ``~/.cache/edgesmith`` for an installed copy."""
    env = os.environ.get("EDGESMITH_CACHE")
    if env:
        root = Path(env)
    elif (SOURCE_ROOT / "pyproject.toml").exists():
        root = SOURCE_ROOT / ".cache"
    else:
        root = Path.home() / ".cache" / "edgesmith"
    if root.is_dir():
        return root
    if root.exists() or root.is_symlink():
        raise EdgesmithError(f"the cache {_cache_name(root)} is a file, not a folder.",
                             "set EDGESMITH_CACHE to a folder (or remove that file).")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cache_error(e, root) from None
    return root


def _cache_name(root: Path) -> str:
    return f"$EDGESMITH_CACHE={root}" if os.environ.get("EDGESMITH_CACHE") else str(root)


def cache_error(e: OSError, where: Path) -> EdgesmithError:
    """An OSError met in the cache as one line that names the cache and the variable that moves it."""
    what, fix = _WRITE_ERRNOS.get(e.errno, (e.strerror or type(e).__name__, "repair it"))
    root = os.environ.get("EDGESMITH_CACHE")
    return EdgesmithError(f"could not write the cache {_cache_name(Path(root) if root else where)}: {what} "
                          f"({e.filename or where}).",
                          f"{fix}, or set EDGESMITH_CACHE to another folder; nothing was left behind.")


class Config:
    """Mixin for (frozen) config dataclasses: ``validate`` runs from ``__post_init__`` and reports a bad
    field through ``_fail`` as an ``EdgesmithError``; ``to_dict``/``to_json``/``from_dict`` round-trip
    through JSON (lists come back as tuples), so a cache key, a claim table and a report name the same thing."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ``EdgesmithError`` (through ``_fail``) on a bad field."""

    def _fail(self, field_name: str, problem: str, fix: str) -> None:
        raise EdgesmithError(f"{type(self).__name__}.{field_name} {problem}.", fix)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict):
        """Lists come back as tuples, and one value given for a list field is a list of one (``--option bits=3``
        means bits [3], ``--option methods=rwkv-gptq`` methods ["rwkv-gptq"], not its letters)."""
        fields = dataclasses.fields(cls)
        names = {f.name for f in fields}
        unknown = sorted(set(d) - names)
        if unknown:
            raise EdgesmithError(f"{cls.__name__} has no option(s) {', '.join(unknown)}.",
                                 f"valid options: {', '.join(sorted(names))}.")
        listed = {f.name for f in fields if isinstance(f.default, tuple)}
        return cls(**{k: tuple(v) if isinstance(v, list) else (v,) if k in listed and isinstance(v, (str, int, float))
                      else v for k, v in d.items()})


@contextlib.contextmanager
def build_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold ``PATH.lock`` while a cache entry is built: processes that need the same entry at once (the cells of
    a parallel sweep) build it once; the others wait, then find it. The lock file stays; it holds no data."""
    from filelock import FileLock

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError as e:
        raise cache_error(e, path.parent) from None
    try:
        yield
    finally:
        lock.release()


_MISS = object()


def _load_entry(path: Path, load: Callable[[Path], Any]) -> Any:
    if path.exists():
        try:
            return load(path)
        except Exception:  # any unreadable or mismatched entry: rebuild
            path.unlink(missing_ok=True)
    return _MISS


def cached(path: str | os.PathLike, make: Callable[[], Any], *, load: Callable[[Path], Any],
           save: Callable[[Any, Path], None]) -> tuple[Any, bool]:
    """The one cache-or-build: ``load(path)`` if the cache entry is there and readable, else ``make()``,
    saved atomically with ``save(value, tmp_path)``. A damaged or mismatched entry (``load`` raises) is
    deleted and rebuilt, never trusted. Built under ``build_lock``; a build that fails takes its lock file with it.
    A full, read-only or missing cache is one ``EdgesmithError`` naming it. Returns (value, whether it came from the
    cache)."""
    path = Path(path)
    value = _load_entry(path, load)
    if value is not _MISS:
        return value, True
    lock = Path(str(path) + ".lock")
    try:
        with build_lock(path):
            value = _load_entry(path, load)  # another process may have built it while this one waited
            if value is not _MISS:
                return value, True
            shipped = SHIPPED_WEIGHTS / path.name
            use_shipped = os.environ.get("EDGESMITH_NO_SHIPPED_WEIGHTS", "") in ("", "0")  # set to 1 to retrain them
            if use_shipped and path.parent.name == "models" and shipped.exists():  # weights shipped under the same key
                try:
                    return load(shipped), True
                except Exception:  # a shipped file that no longer matches the code: train as if it were not there
                    pass
            value = make()
            try:
                with atomic_path(path, force=True) as tmp:
                    save(value, tmp)
            except EdgesmithError as e:
                cause = e.__context__ if isinstance(e.__context__, OSError) else None
                raise (cache_error(cause, path.parent) if cause else e) from None
            except OSError as e:
                raise cache_error(e, path.parent) from None
    except BaseException:
        # nothing was cached: the (empty) lock file would only be litter; a waiter still holding it builds anew
        lock.unlink(missing_ok=True)
        raise
    return value, False


def _save_torch(value: Any, tmp: Path) -> None:
    """``torch.save`` through memory, so that a full disk is an OSError with its errno (torch's own file writer turns
    it into a RuntimeError without one)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(value, buf)
    tmp.write_bytes(buf.getvalue())


def torch_cached(path: str | os.PathLike, make: Callable[[], Any], load: Callable[[Any], Any] | None = None) -> tuple[Any, bool]:
    """``cached`` for torch-serialisable values (state dicts, dicts of tensors): ``make()`` builds the value
    to store; ``load`` (optional) turns what was stored back into what the caller wants."""
    import torch

    return cached(path, make, load=lambda p: (load or (lambda v: v))(torch.load(p, weights_only=True)),
                  save=_save_torch)


def module_cached(path: str | os.PathLike, new: Callable[[], Any], make: Callable[[], Any]) -> tuple[Any, bool]:
    """``cached`` for a torch module: its state dict is stored; a cache hit loads it into ``new()``.
    ``make()`` returns the trained module. Returns (module in eval mode, whether it came from the cache)."""
    import torch

    def load(p):
        module = new()
        module.load_state_dict(torch.load(p, weights_only=True))
        return module

    module, hit = cached(path, make, load=load, save=lambda m, tmp: _save_torch(m.state_dict(), tmp))
    return module.eval(), hit


def load_or_train(model, path: Path, train: Callable[[], Any]) -> Any:
    """Load ``model``'s weights from the cache file ``path``, or call ``train()`` (which fits ``model``
    in place) and cache its state dict. Returns what ``train`` returned, or None when the weights came
    from the cache."""
    result = {}

    def make():
        result["value"] = train()
        return model.state_dict()

    torch_cached(path, make, load=model.load_state_dict)
    return result.get("value")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL this process when its parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:  # not Linux: the process group kill below still covers normal exits
        pass


def run_child(cmd: list[str], *, timeout_s: float | None = None, env: dict | None = None, cwd=None):
    """``subprocess.run(cmd, capture_output=True, text=True)`` whose child cannot outlive us: it runs in its
    own process group, gets SIGKILL when this process dies (even by SIGKILL), and its whole group is killed
    when we stop waiting for it (timeout, Ctrl-C, any exception). Raises ``subprocess.TimeoutExpired``."""
    import signal
    import subprocess

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True, preexec_fn=_die_with_parent)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# --- the Lava env (Python 3.10: lava-nc 0.10, lava-dl 0.6) ------------------------------------------------

LAVA_ENV_VAR = "EDGESMITH_LAVA_PYTHON"


# what `edgesmith setup lava` (and `make setup`) installs: lava-dl pins torch >=2.3.1,<2.4, and opencv-python-headless
# 4.12+ wants numpy 2, which lava-nc cannot import
LAVA_REQUIREMENTS = ("lava-nc==0.10.0", "lava-dl==0.6.0", "torch>=2.3.1,<2.4", "numpy<2", "opencv-python-headless<4.12",
                     "networkx<=2.8.7", "scipy", "h5py")
LAVA_STAMP = ".edgesmith-lava-ready"  # written into a Lava env once every requirement installed


def default_lava_env() -> Path:
    """Where `edgesmith setup lava` builds the Lava env: .venv-lava in a source checkout, else beside the user cache."""
    if (SOURCE_ROOT / "pyproject.toml").exists():
        return SOURCE_ROOT / ".venv-lava"
    return cache_dir() / "venv-lava"


def lava_python() -> Path:
    """The Lava env's interpreter: $EDGESMITH_LAVA_PYTHON, else that of ``default_lava_env``."""
    override = os.environ.get(LAVA_ENV_VAR)
    return Path(override) if override else default_lava_env() / "bin" / "python"


def lava_available() -> tuple[bool, str]:
    """Whether the Lava env's interpreter is there and runnable, and if not, what to do."""
    py = lava_python()
    if not py.exists():
        return False, (f"the Lava Python 3.10 env was not found at {py}. Fix: run `edgesmith setup lava` to build it "
                       "(about 5.6 GB; `make setup` in a source checkout), or point "
                       f"{LAVA_ENV_VAR} at the Python of an env with lava-nc 0.10 and lava-dl 0.6.")
    if not py.is_file() or not os.access(py, os.X_OK):
        return False, (f"{py} is not an executable Python interpreter (a folder, or not executable). Fix: point "
                       f"{LAVA_ENV_VAR} at the python of an env with lava-nc 0.10 and lava-dl 0.6 "
                       "(e.g. .venv-lava/bin/python).")
    return True, ""


def run_in_lava_env(script: Path, args: list[str], *, timeout_s: float, cwd, what: str, too_long_fix: str,
                    failed_fix: str, expect: Path | None = None) -> float:
    """Run a standalone script with the Lava env's Python; return its wall time in seconds.

    Every failure is one ``EdgesmithError``: no Lava env, a run past ``timeout_s``, or a script that exits
    non-zero or does not write ``expect`` (its last stderr line is quoted)."""
    import subprocess
    import time

    ok, why = lava_available()
    if not ok:
        problem, _, fix = why.partition(" Fix: ")
        raise EdgesmithError(problem, fix or None)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    t0 = time.perf_counter()
    try:
        proc = run_child([str(lava_python()), str(script), *args], timeout_s=timeout_s, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise EdgesmithError(f"{what} ran past {timeout_s:.0f} s.", too_long_fix) from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or (expect is not None and not Path(expect).exists()):
        lines = [ln.strip() for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        last = lines[-1][:400] if lines else "(no error output)"
        raise EdgesmithError(f"{Path(script).name} failed: {last}", failed_fix)
    return wall
