"""One interface for every backend: load an artifact, run inputs, get outputs plus run statistics.

    rt = get_runtime("onnxruntime", threads=2).load(artifact)
    result = rt.run(x)          # RunResult(outputs=np.ndarray, stats={...}, named={...})
    result = rt.run({"input_ids": ids, "mask": m})   # several named inputs (runtimes with multi_input)

Each backend is one file in this package with the same small class shape (tinygrad style); adding a
backend is adding a file and one registration line in ``runtimes/__init__.py``. ``__init__`` stores
options only; ``load`` does the work and returns ``self``; loaded state ends in ``_``.

Inputs keep their dtype (token ids stay int64); float64 arrays become float32, the precision every
backend computes in. ``outputs`` is the model's first output; ``named`` holds every output by name
(a recurrent step graph returns its next state there).
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError
from edgesmith.common.registry import Registry


@dataclass
class RunResult:
    """Outputs of one ``run`` call and what the backend knows about it.

    ``stats`` always has ``wall_s`` (the call's wall time in this process, measured with
    perf_counter). Backends add their own: thread count, compile time, activity counts (Lava).
    """

    outputs: np.ndarray
    stats: dict = field(default_factory=dict)
    named: dict[str, np.ndarray] | None = None  # every output by name, where the backend names them


class Runtime(ABC):
    name: ClassVar[str]
    formats: ClassVar[tuple[str, ...]]  # artifact formats this backend loads
    description: ClassVar[str] = ""
    # name of a runtime that must reproduce this one's outputs exactly (a bit-exact simulator model)
    bit_exact_reference: ClassVar[str | None] = None
    multi_input: ClassVar[bool] = False  # takes a dict of named inputs (else exactly one array)
    # the kind of artifact the registry contract tests (tests/test_contracts.py) load into this backend
    contract_fixture: ClassVar[str] = ""

    def __init__(self, threads: int | None = None, **options):
        self.threads = threads
        self.options = options

    def load(self, artifact: Artifact) -> "Runtime":
        if artifact.format not in self.formats:
            raise EdgesmithError(
                f"runtime {self.name!r} cannot load a {artifact.format} artifact ({artifact.describe()}).",
                f"export to one of: {', '.join(self.formats)}.",
            )
        if artifact.path is not None and not artifact.path.exists():
            raise EdgesmithError(f"model file {artifact.path} does not exist.", "check the path or re-run the export.")
        self.artifact_ = artifact
        self._load(artifact)
        return self

    @abstractmethod
    def _load(self, artifact: Artifact) -> None:
        ...

    def run(self, inputs) -> RunResult:
        if not hasattr(self, "artifact_"):
            raise RuntimeError(f"{self.name}: call load() before run()")
        if isinstance(inputs, dict):
            if not self.multi_input and len(inputs) != 1:
                raise EdgesmithError(f"runtime {self.name!r} feeds one input but got {len(inputs)} "
                                     f"({', '.join(inputs)}).", "use the onnxruntime runtime for models with "
                                     "several inputs.")
            x = {k: as_input(v) for k, v in inputs.items()} if self.multi_input else as_input(next(iter(inputs.values())))
        else:
            x = as_input(inputs)
        self._check_shape(x)
        t0 = time.perf_counter()
        out, stats = self._run(x)
        stats = {"wall_s": time.perf_counter() - t0, "runtime": self.name, **stats}
        if isinstance(out, dict):
            named = {k: np.asarray(v) for k, v in out.items()}
            return RunResult(next(iter(named.values())), stats, named)
        return RunResult(np.asarray(out), stats)

    def _check_shape(self, x) -> None:
        expected = self.artifact_.meta.get("input_shape")  # None as a dimension: any size (e.g. frames of a stream)
        if expected is not None and not isinstance(x, dict) and (
                len(x.shape) != len(expected) + 1 or any(e is not None and d != e for d, e in zip(x.shape[1:], expected))):
            raise EdgesmithError(
                f"input has shape {tuple(x.shape)} but the model expects (batch, {', '.join(map(str, expected))}).",
                "reshape the input to the model's input shape.",
            )

    @abstractmethod
    def _run(self, x) -> tuple:
        """``x``: one array, or a dict of named arrays for ``multi_input`` backends. Returns (outputs, stats);
        outputs is one array or a dict of named arrays (first entry = the primary output)."""

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether this backend can run here, and if not, why (and how to fix it)."""
        return True, ""


def as_input(x) -> np.ndarray:
    """A C-contiguous array in the dtype a backend computes in: float64 -> float32, others unchanged."""
    a = np.asarray(x)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return np.ascontiguousarray(a)


# a per-name table: asking for one runtime imports only its module
RUNTIMES: Registry[type[Runtime]] = Registry("runtime", "edgesmith.runtimes:RUNTIME_MODULES")


def register_runtime(cls: type[Runtime]) -> type[Runtime]:
    return RUNTIMES.register(cls.name, cls)


def runtime_names() -> list[str]:
    return RUNTIMES.names()


def get_runtime(name: str, **options) -> Runtime:
    cls = RUNTIMES.get(name)
    ok, why = cls.available()
    if not ok:  # ``why`` is "problem. Fix: what to do"
        problem, _, fix = why.partition(" Fix: ")
        raise EdgesmithError(f"runtime {name!r} is not available: {problem}", fix or "see the runtime's documentation.")
    return cls(**options)
