"""Safe writes: atomic files and folders, ``--force`` rules, scratch folders, special-file and path checks."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from edgesmith.common.errors import EdgesmithError


OUTPUT_MARKER = ".edgesmith-output"  # written into every folder edgesmith writes: --force may replace only those
# what folders edgesmith wrote before the marker existed hold: they may be replaced too
_OUR_FILES = ("report.json", "summary.json", "table.json", "sweep.json")
WRITE_ERRNOS = {errno.ENOSPC: ("the disk is full", "free some space (or write elsewhere) and run it again"),
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
    known = WRITE_ERRNOS.get(e.errno)
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
