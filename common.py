"""Shared plumbing for every edgesmith package: the user-error type, safe writes, seeding, the config
base and cache-or-train.

It sits at the root of the ``edgesmith`` namespace, outside the five packages of the data flow
(models -> compress -> hardware -> runtimes -> bench), so every one of them may import it without the
flow turning back. It imports nothing heavy: a latency worker that only times onnxruntime loads it.
"""
from __future__ import annotations

import contextlib
import dataclasses
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


def import_modules(names) -> None:
    """Import each named module once: how the registries load their entries on first use."""
    import importlib

    for name in names:
        importlib.import_module(name)


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


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success rename it into place.

    Works for files and directories alike: whatever the caller creates at the yielded path is
    moved to ``final`` only if the block finishes without an exception, so a crash never leaves a
    half-written artifact. An existing ``final`` is replaced only with ``force=True``.
    """
    final = Path(final)
    if final.exists() and not force:
        raise EdgesmithError(
            f"{final} already exists and would be overwritten.",
            "choose another output path or pass --force to replace it.",
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    tmp = tmp_dir / final.name
    try:
        yield tmp
        if not tmp.exists():
            raise RuntimeError(f"nothing was written to the temporary path for {final}")
        if final.exists():
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)
            else:
                final.unlink()
        os.replace(tmp, final)
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
    root.mkdir(parents=True, exist_ok=True)
    return root


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
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise EdgesmithError(f"{cls.__name__} has no option(s) {', '.join(unknown)}.",
                                 f"valid options: {', '.join(sorted(names))}.")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def cached(path: str | os.PathLike, make: Callable[[], Any], *, load: Callable[[Path], Any],
           save: Callable[[Any, Path], None]) -> tuple[Any, bool]:
    """The one cache-or-build: ``load(path)`` if the cache entry is there and readable, else ``make()``,
    saved atomically with ``save(value, tmp_path)``. A damaged or mismatched entry (``load`` raises) is
    deleted and rebuilt, never trusted. Returns (value, whether it came from the cache)."""
    path = Path(path)
    if path.exists():
        try:
            return load(path), True
        except Exception:  # any unreadable or mismatched entry: rebuild
            path.unlink(missing_ok=True)
    value = make()
    with atomic_path(path, force=True) as tmp:
        save(value, tmp)
    return value, False


def torch_cached(path: str | os.PathLike, make: Callable[[], Any], load: Callable[[Any], Any] | None = None) -> tuple[Any, bool]:
    """``cached`` for torch-serialisable values (state dicts, dicts of tensors): ``make()`` builds the value
    to store; ``load`` (optional) turns what was stored back into what the caller wants."""
    import torch

    return cached(path, make, load=lambda p: (load or (lambda v: v))(torch.load(p, weights_only=True)),
                  save=lambda v, tmp: torch.save(v, tmp))


def module_cached(path: str | os.PathLike, new: Callable[[], Any], make: Callable[[], Any]) -> tuple[Any, bool]:
    """``cached`` for a torch module: its state dict is stored; a cache hit loads it into ``new()``.
    ``make()`` returns the trained module. Returns (module in eval mode, whether it came from the cache)."""
    import torch

    def load(p):
        module = new()
        module.load_state_dict(torch.load(p, weights_only=True))
        return module

    module, hit = cached(path, make, load=load, save=lambda m, tmp: torch.save(m.state_dict(), tmp))
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
