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
    # the install extra that brings this backend's package (a benchmark peer such as OpenVINO), or None when
    # edgesmith's own dependencies carry it; where the extra is missing, available() names it
    extra: ClassVar[str | None] = None
    # options this backend wants in a pass whose output it runs ({pass kind: {option: value}}): a plan that asks
    # for this runtime on a variant with such a pass gets a copy of the variant built with them, run only here
    pass_options: ClassVar[dict[str, dict]] = {}

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


def cast_for_input(name: str, x: np.ndarray, dtype, shape) -> np.ndarray:
    """``x`` as the declared ``dtype`` of input ``name`` (ints may become floats), after a rank/shape check."""
    dtype = np.dtype(dtype)
    if x.dtype != dtype:
        ok = (np.issubdtype(dtype, np.floating) and (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating))) \
            or (np.issubdtype(dtype, np.integer) and np.issubdtype(x.dtype, np.integer))
        if not ok:
            raise EdgesmithError(f"input {name!r} is {x.dtype} but the model takes {dtype}.",
                                 f"give {name!r} as {dtype} data.")
        if np.issubdtype(dtype, np.integer) and np.issubdtype(x.dtype, np.integer):
            info = np.iinfo(dtype)
            if x.size and (x.min() < info.min or x.max() > info.max):
                raise EdgesmithError(f"input {name!r} holds values outside the range of {dtype}.",
                                     f"give {name!r} values in [{info.min}, {info.max}].")
        x = x.astype(dtype)
    if shape is not None:
        if x.ndim != len(shape):
            raise EdgesmithError(f"input {name!r} has shape {tuple(x.shape)} but the model takes rank {len(shape)} "
                                 f"({', '.join(str(d) if isinstance(d, int) else '?' for d in shape)}).",
                                 f"reshape {name!r} to the model's input shape.")
        bad = [i for i, d in enumerate(shape) if isinstance(d, int) and d > 0 and x.shape[i] != d]
        if bad:
            raise EdgesmithError(f"input {name!r} has shape {tuple(x.shape)} but the model takes "
                                 f"({', '.join(str(d) if isinstance(d, int) else '?' for d in shape)}).",
                                 f"reshape {name!r} to the model's input shape (dimension {bad[0]} differs).")
    return np.ascontiguousarray(x)


def check_input_names(declared, x: dict) -> None:
    """Refuse a dict of inputs whose names are not exactly the model's ``declared`` input names."""
    missing = [n for n in declared if n not in x]
    extra = [n for n in x if n not in declared]
    if missing or extra:
        raise EdgesmithError(
            f"the model takes inputs {', '.join(declared)} but got {', '.join(x)}"
            + (f" (missing {', '.join(missing)})" if missing else "")
            + (f" (unknown {', '.join(extra)})" if extra else "") + ".",
            "name the arrays after the model's inputs (an .npz with one array per input name).")


class NamedInputRuntime(Runtime):
    """A backend fed by input name (ONNX runtimes): ``_load`` sets ``inputs_`` = {name: (dtype, shape)}, the
    inputs the graph declares; each array is checked against its input and cast before the call."""

    multi_input = True

    def _check_shape(self, x) -> None:
        if isinstance(x, dict):
            check_input_names(self.inputs_, x)
        else:
            if len(self.inputs_) != 1:
                raise EdgesmithError(f"the model takes {len(self.inputs_)} inputs ({', '.join(self.inputs_)}) but got "
                                     "one array.", "give one array per input name (an .npz or a dict).")
            super()._check_shape(x)

    def _feed(self, x) -> dict:
        """{input name: array in its declared dtype} for one array (the only input) or a dict of named arrays."""
        items = x.items() if isinstance(x, dict) else [(next(iter(self.inputs_)), x)]
        return {n: cast_for_input(n, a, *self.inputs_[n]) for n, a in items}


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
