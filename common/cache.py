"""The user cache: its folder, shipped weights, build locks and cache-or-build helpers."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Iterator


from edgesmith.common.errors import EdgesmithError
from edgesmith.common.files import WRITE_ERRNOS, atomic_path


SOURCE_ROOT = Path(__file__).resolve().parents[1]  # the checkout (or the installed package folder)
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
    what, fix = WRITE_ERRNOS.get(e.errno, (e.strerror or type(e).__name__, "repair it"))
    root = os.environ.get("EDGESMITH_CACHE")
    return EdgesmithError(f"could not write the cache {_cache_name(Path(root) if root else where)}: {what} "
                          f"({e.filename or where}).",
                          f"{fix}, or set EDGESMITH_CACHE to another folder; nothing was left behind.")


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
