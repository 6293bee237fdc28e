"""Model sources: how ``edgesmith deploy SOURCE`` turns SOURCE into a producer.

SOURCE is a registered producer name (``edgesmith models``) or a path/reference a model source
recognises: an ONNX file, ``file.py:factory`` (a torch module), a TorchScript or ``torch.export`` file,
an official RWKV-6/7 checkpoint, an edgesmith-quantized RWKV file, a saved GBRL tree ensemble. Each
source is one file here with the same small shape (``matches``, ``load``) and one line in
``bench/sources/__init__.py``. A source returns a ``models.user.UserModel`` carrying the user's data
(``UserRequest``); a producer given user data is wrapped the same way.

Sources live in ``bench`` because some read what ``compress`` wrote (a quantized checkpoint); the
producer they return lives in ``models`` like every other.
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from edgesmith.common import EdgesmithError, cache_dir, regular_file
from edgesmith.common.registry import Registry


@dataclass
class UserRequest:
    """What the user gave besides the model: data files, metric, shapes and the source's own options."""

    calibration_data: str | None = None
    eval_data: str | None = None
    labels: str | None = None
    metric: str | None = None
    input_shapes: dict = field(default_factory=dict)  # input name ("" for the only one) -> per-sample shape
    input_types: dict = field(default_factory=dict)  # input name ("" for the only one) -> numpy type name
    options: dict = field(default_factory=dict)  # the source's options (--model-option for user models)
    seed: int = 0
    trust_model_file: bool = False  # --trust-model-file: a model file may be unpickled (it can run code)
    input_shapes_read: bool = field(default=False, repr=False)  # set where example inputs were made from them

    @property
    def has_data(self) -> bool:
        return any(x is not None for x in (self.calibration_data, self.eval_data, self.labels, self.metric))

    def take(self, key: str, default=None):
        """A source option, removed from the pending ones (what is left over is refused, not ignored)."""
        return self.options.pop(key, default)

    def check_all_used(self, source: str) -> None:
        if self.options:
            raise EdgesmithError(f"the {source} source has no option(s) {', '.join(sorted(self.options))}.",
                                 "see `edgesmith models` for the options each model source takes.")
        if self.input_shapes and not self.input_shapes_read:  # a flag that did nothing would mislead
            given = "the data files" if self.calibration_data or self.eval_data else f"the {source} file itself"
            raise EdgesmithError(f"--input-shape was not used: the input shapes come from {given}.",
                                 "drop --input-shape (it makes example inputs for a model given no data).")


class ModelSource(ABC):
    """One way to load a user's model. ``matches`` must be cheap (extension, a few bytes)."""

    name: ClassVar[str]
    description: ClassVar[str]
    options_help: ClassVar[str] = ""
    traced: ClassVar[bool] = False  # the model is traced to ONNX on example inputs (data files or --input-shape)

    @abstractmethod
    def matches(self, spec: str) -> bool:
        ...

    @abstractmethod
    def load(self, spec: str, request: UserRequest):
        """The ``UserModel`` for ``spec`` with the request's data (raise ``EdgesmithError`` on bad input)."""


def work_path(spec_bytes: bytes, suffix: str) -> Path:
    """Where a source keeps what it derives from a user's file (an ONNX export, a prepared graph): the
    cache, keyed by the content, so the same file gives the same path and no user folder is written to."""
    digest = hashlib.sha256(spec_bytes).hexdigest()[:20]
    path = cache_dir() / "sources" / f"{digest}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest()


SOURCES: Registry[type[ModelSource]] = Registry("model source", "edgesmith.bench.sources:SOURCE_MODULES")


def register_source(cls: type[ModelSource]) -> type[ModelSource]:
    return SOURCES.register(cls.name, cls)


def source_names() -> list[str]:
    """In registration order: the order sources are tried in."""
    return SOURCES.in_order()


def find_source(spec: str) -> ModelSource | None:
    """The first registered model source that recognises ``spec`` (None when none does)."""
    return next((src for src in (SOURCES.get(n)() for n in source_names()) if src.matches(spec)), None)


def describe_sources() -> list[dict]:
    return [{"name": n, "description": SOURCES.get(n).description, "options": SOURCES.get(n).options_help}
            for n in source_names()]


MAX_SAMPLE_ELEMENTS = 2 ** 24  # per example sample: 64 MiB of float32, 2 GiB for the 32 synthetic samples
# the element types --input-shape may name; how each is filled: input_fill
INPUT_TYPES = ("float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def parse_input_shapes(items) -> tuple[dict, dict]:
    """``--input-shape 3,64,64``, ``name=1,16`` or ``ids=128:int64`` (repeatable) -> ({name or "": shape},
    {name or "": element type, where one is given}). The name is read up to the last ``=``, so names with
    ``:`` in them (``input_1:0``) keep it."""
    shapes, types = {}, {}
    for item in items or []:
        name, _, rest = item.rpartition("=")
        dims, _, dtype = rest.partition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise EdgesmithError(f"--input-shape {item!r} is not a list of integers.",
                                 "write it like 3,64,64, name=1,16 or ids=128:int64.") from None
        if not shape or any(d < 1 for d in shape):
            raise EdgesmithError(f"--input-shape {item!r} has no positive dimensions.", "write it like 3,64,64.")
        if int(np.prod(shape, dtype=np.float64)) > MAX_SAMPLE_ELEMENTS:  # 32 synthetic samples must fit in memory
            raise EdgesmithError(f"--input-shape {item!r} makes samples of {np.prod(shape, dtype=np.float64):.3g} "
                                 f"elements; edgesmith makes example inputs of up to {MAX_SAMPLE_ELEMENTS:,} per sample.",
                                 "give the per-sample shape without the batch (e.g. 3,224,224), or pass data files.")
        if dtype and dtype.strip() not in INPUT_TYPES:
            raise EdgesmithError(f"--input-shape {item!r}: {dtype!r} is not an input type edgesmith makes.",
                                 f"use one of {', '.join(INPUT_TYPES)} after the ':' (e.g. ids=128:int64).")
        shapes[name.strip()] = shape
        if dtype:
            types[name.strip()] = dtype.strip()
    return shapes, types


SYNTHETIC_SAMPLES = 32  # inputs made from --input-shape to score a model given no data (fidelity to fp32)


def synthetic_evaluation(specs, request: UserRequest, id_bounds: dict | None = None):
    """Inputs made from ``--input-shape`` for a model given no data files, labelled as such: the model is then
    scored by its outputs' agreement with the fp32 model's on them (fidelity), never by accuracy. ``id_bounds``
    ({input: rows of the table it indexes}) lets token ids vary below that bound; other integers are ones if the
    input's name says it is a mask, else zeros. None without ``--input-shape``."""
    from edgesmith.models.user_data import TensorData

    if not request.input_shapes:
        return None
    bounds = id_bounds or {}
    inputs = sample_inputs(specs, request, n=SYNTHETIC_SAMPLES, seed=request.seed, id_bounds=bounds)
    made = [f"{s.name}: {input_fill(s.name, s.dtype, bounds)[1]}" for s in specs]
    return TensorData(inputs, origin=f"synthetic inputs from --input-shape ({'; '.join(made)}; no --eval-data): "
                                     "fidelity to the fp32 model, not a task score")


def given_for(table: dict, name: str, n_inputs: int):
    """The ``--input-shape`` entry for input ``name``: its own, or the unnamed one when the model has one input."""
    return table.get(name) or (table.get("") if n_inputs == 1 else None)


def check_given_type(types: dict, name: str, n_inputs: int, declared, where: str, fix: str) -> None:
    """An ``--input-shape`` type for input ``name`` that differs from the type ``where`` declares is refused."""
    said = given_for(types, name, n_inputs)
    if said is not None and np.dtype(said) != np.dtype(declared):
        raise EdgesmithError(f"--input-shape says {said} for input {name!r}, which the {where} declares "
                             f"{np.dtype(declared).name}.", fix.format(said=said, declared=np.dtype(declared).name))


def resolve_model(spec: str, request: UserRequest, *, seed: int = 0):
    """A producer for ``spec``: a registered producer (wrapped with the user's data if any), or what the
    first model source that recognises ``spec`` loads."""
    from edgesmith.models import get_producer, producer_names

    if spec in producer_names():
        if request.input_shapes:  # a producer's inputs are its own: the flag would do nothing
            raise EdgesmithError(f"--input-shape traces a model file without data; {spec} is a producer, which has its "
                                 f"own input shape.", "drop --input-shape.")
        producer = get_producer(spec, seed=seed, **request.options)
        if not request.has_data:
            return producer
        from edgesmith.bench.sources.producer_data import with_user_data

        return with_user_data(producer, request)
    src = find_source(spec)
    if src is not None:
        _check_model_file(spec)
        model = src.load(spec, request)
        request.check_all_used(src.name)
        return model
    _refuse_unknown(spec)


def _model_stem(spec: str) -> Path:
    """The file a model spec names (``net.py`` of ``net.py:make``)."""
    from edgesmith.bench.sources.torch_factory import split_factory

    return Path(split_factory(spec)[0])


def _check_model_file(spec: str) -> None:
    """A model file that exists must be a regular file: a FIFO would block its loader forever."""
    stem = _model_stem(spec)
    if stem.exists() and not stem.is_dir():
        regular_file(stem, "model file")


def check_model_spec(spec: str) -> None:
    """Without loading anything, what ``resolve_model`` would refuse first: ``spec`` names neither a producer nor
    a file (``net.py`` of ``net.py:make``) that exists, is a regular file and a model source reads. A sweep and a demo
    check every model this way before their first deploy."""
    from edgesmith.models import producer_names

    if spec in producer_names():
        return
    if find_source(spec) is None:
        _refuse_unknown(spec)
    if not _model_stem(spec).exists():
        raise EdgesmithError(f"model file {_model_stem(spec)} does not exist.", "check the path.")
    _check_model_file(spec)


def _refuse_unknown(spec: str):
    names = source_names()
    if Path(spec).exists():
        raise EdgesmithError(f"{spec} is not a model file edgesmith can read.",
                             f"give an ONNX file, file.py:factory, a TorchScript (.pt) or torch.export (.pt2) file, an "
                             f"RWKV .pth checkpoint, a saved tree ensemble (.npz), a netx network (.net/.h5) or a NIR "
                             f"graph (.nir); sources: {', '.join(names)}.")
    raise EdgesmithError(f"unknown model {spec!r}: neither a registered producer nor a file.",
                         f"use a producer name (see `edgesmith models`) or a path; sources: {', '.join(names)}.")


def sample_inputs(specs, request: UserRequest, n: int = 2, seed: int = 0,
                  id_bounds: dict | None = None) -> dict[str, np.ndarray]:
    """Example inputs for tracing or exporting a model: the user's data if given, else ``--input-shape``
    (standard normal floats; integers random below ``id_bounds[name]`` where given, ones for a mask, else
    zeros: see ``input_fill``)."""
    from edgesmith.models.user_data import load_tensors

    for path in (request.calibration_data, request.eval_data):
        if path is not None:
            data = load_tensors(path, specs, "example data")
            return data.take(slice(0, n))
    request.input_shapes_read = True
    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        shape = given_for(request.input_shapes, s.name, len(specs))
        if shape is None and s.shape and None not in s.shape:  # a model that fixes its own shapes (a .pt2 program)
            shape = s.shape
        if shape is None:
            raise EdgesmithError(f"no example data for input {s.name!r} to trace the model with.",
                                 "pass --calibration-data / --eval-data, or --input-shape (e.g. 3,64,64 or "
                                 f"{s.name}=3,64,64).")
        dt = np.dtype(s.dtype)
        check_given_type(request.input_types, s.name, len(specs), dt, "model", "drop ':{said}' or write :{declared}.")
        out[s.name] = synthetic_array(s.name, dt, (n, *shape), rng, id_bounds or {})
    return out


def synthetic_array(name: str, dtype, shape: tuple, rng: np.random.Generator, id_bounds: dict) -> np.ndarray:
    """One synthetic input of ``shape``, filled as ``input_fill`` says."""
    how = input_fill(name, dtype, id_bounds)[0]
    if how == "normal":
        return rng.standard_normal(shape).astype(dtype)
    if how == "ids":
        return rng.integers(0, id_bounds[name], shape).astype(dtype)
    return (np.ones if how == "ones" else np.zeros)(shape, dtype)


def input_fill(name: str, dtype, id_bounds: dict) -> tuple[str, str]:
    """How a synthetic input is filled, and the words a report uses for it. Floats: standard normal. Integers
    that index a table: random ids below its rows. An integer or boolean input named like a mask
    (``attention_mask``): ones, every position kept; zeros would mask every position, and a transformer then
    attends to nothing real (Hugging Face Optimum's dummy inputs key masks by name the same way). Any other
    integer: zeros, valid for an id, a count or an index."""
    if np.dtype(dtype).kind == "f":
        return "normal", "standard normal"
    if name in id_bounds:
        return "ids", f"random ids below {id_bounds[name]}, the rows it indexes"
    if "mask" in name.lower():
        return "ones", "ones (its name says mask: every position kept)"
    return "zeros", "zeros"
