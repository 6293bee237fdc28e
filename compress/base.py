"""Pass machinery: a pass is a config dataclass plus a handler registered for that config type.

    @dataclass
    class Int8QdqConfig(PassConfig):
        kind: ClassVar[str] = "int8-qdq"
        calibration: str = "minmax"
        def validate(self): ...

    @register_pass(Int8QdqConfig)
    def _int8(artifact, config, ctx) -> PassResult: ...

``apply_pass(artifact, config, ctx)`` dispatches on the config's type. Configs validate on
construction and round-trip through JSON (``to_dict`` / ``config_from_dict``), so a recipe file and
a report name the same thing. Artifacts are what flows between passes: an in-memory torch module or
a file in one of the export formats.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from edgesmith.common import Config, EdgesmithError, Feeds, batch_axes, check_finite_array, n_samples, sample_slice
from edgesmith.common.registry import Registry

# --- artifacts -----------------------------------------------------------------------------------

INIT_SUFFIX = ".init.npz"  # beside a step graph: its trained starting state (runtimes.stateful reads it)


@dataclass
class Artifact:
    """A model at one point of the pipeline.

    ``format`` is a registered format (``compress.formats``). An in-memory one (torch, trees) carries ``module``
    (in eval mode); the others carry ``path`` to a file written atomically by the pass that produced it. ``meta`` holds
    facts later stages need (input name and shape, quantization scheme, which passes ran).
    """

    format: str
    path: Path | None = None
    module: Any = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        from edgesmith.compress.formats import FORMATS

        fmt = FORMATS.find(self.format)
        if fmt is None:
            raise ValueError(f"unknown artifact format {self.format!r}; expected one of {FORMATS.names()}")
        if fmt.in_memory and self.module is None:
            raise ValueError(f"a {self.format} artifact needs a module")
        if not fmt.in_memory and self.path is None:
            raise ValueError(f"a {self.format} artifact needs a path")
        if self.path is not None:
            self.path = Path(self.path)

    def size_bytes(self) -> int:
        """Bytes on disk (for torch: the fp32 parameter and buffer bytes, as a state dict would hold)."""
        if self.path is not None:
            p = Path(self.path)
            if p.is_dir():
                return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            return p.stat().st_size
        if hasattr(self.module, "size_bytes"):  # e.g. a tree ensemble reports its own array bytes
            return int(self.module.size_bytes())
        return int(sum(t.numel() * t.element_size() for t in self.module.state_dict().values()))

    def describe(self) -> str:
        return f"{self.format}:{self.path}" if self.path else f"{self.format}:<in memory>"


# --- configs ----------------------------------------------------------------------------------------

PASSES: Registry[type["PassConfig"]] = Registry("pass", "edgesmith.compress:PASS_MODULES")  # kind -> config type


@dataclass
class PassConfig(Config):
    """Base class of every pass config. Subclasses set ``kind``, ``input_format``, ``output_format``;
    ``validate`` runs on construction (``edgesmith.common.Config``)."""

    kind: ClassVar[str] = ""
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "torch"
    # the model it must transform in the contract check (edgesmith.testing.FIXTURES); "" for the generic model of
    # its input format (the digits MLP, its ONNX export, a tree ensemble, a NIR graph)
    contract_fixture: ClassVar[str] = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}

    def _fail(self, field_name: str, problem: str, fix: str) -> None:
        raise EdgesmithError(f"{self.kind}: {field_name} {problem}.", fix)


def config_from_dict(d: dict) -> PassConfig:
    """Rebuild a config from ``to_dict`` output (or a recipe table): ``{"kind": ..., fields...}``."""
    d = dict(d)
    cls = PASSES.get(d.pop("kind", None))
    kind = cls.kind
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise EdgesmithError(
            f"pass {kind!r} has no option(s) {', '.join(unknown)}.",
            f"valid options: {', '.join(sorted(names)) or '(none)'}.",
        )
    for f in dataclasses.fields(cls):  # JSON has lists where configs hold tuples
        if f.name in d and isinstance(d[f.name], list):
            d[f.name] = tuple(d[f.name])
    return cls(**d)


def config_from_json(s: str) -> PassConfig:
    return config_from_dict(json.loads(s))


def pass_kinds() -> list[str]:
    return PASSES.names()


def pass_config_type(kind: str) -> type["PassConfig"]:
    return PASSES.get(kind)


# --- reports and context ----------------------------------------------------------------------------


@dataclass
class LayerReport:
    """Per-layer facts of one pass: what happened to one weight tensor and how much it hurt."""

    name: str
    action: str  # "quantized", "skipped", "pruned", ...
    bits_per_weight: float | None = None
    n_params: int | None = None
    error: dict = field(default_factory=dict)  # e.g. {"weight_sqnr_db": 38.1, "output_sqnr_db": 31.0}
    reason: str = ""
    graph: str = ""  # the subgraph the layer sits in ("If 'cond' then_branch"); empty for the main graph

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, "", {})}


@dataclass
class PassReport:
    """What a pass did: sizes, bits per weight, per-layer detail, skipped layers, timing."""

    config: dict
    input_format: str
    output_format: str
    size_before_bytes: int
    size_after_bytes: int
    bits_per_weight: float | None = None
    layers: list[LayerReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def skipped(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.action == "skipped"]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["layers"] = [layer.to_dict() for layer in self.layers]
        d["skipped_layers"] = self.skipped
        return d


@dataclass
class PassContext:
    """What a handler may use besides the artifact: calibration data, a work folder, a seed.

    ``evaluate`` (optional) scores an artifact with the producer's metric; passes use it for the
    per-layer sensitivity table. ``example_input`` fixes the exported input shape. ``train_data``
    (optional) is what training passes fine-tune on (``Producer.training_data``); ``train_fn`` (optional,
    the Python API's) is the user's own loop, ``train_fn(model)``, that a QAT pass calls in place of its own.
    ``keep`` (optional): a folder where a pass keeps what it computed for this model and data (int8's calibration
    ranges) and reads what an earlier run kept, so rebuilding a variant with more layers left out (a goal's search)
    calibrates once. ``detail`` false: the run is only scored, so per-layer reports and diagnostics may be skipped.
    """

    workdir: Path
    calibration: np.ndarray | None = None
    example_input: np.ndarray | None = None
    seed: int = 0
    evaluate: Callable[[Artifact], float] | None = None
    sensitivity: bool = False
    progress: bool = True
    train_data: Any = None
    train_fn: Callable[[Any], Any] | None = None
    keep: Path | None = None
    detail: bool = True

    def calibration_checked(self, what: str = "calibration data"):
        """The calibration samples (one array, or a dict by input name), each checked non-empty and finite."""
        if self.calibration is None:
            raise EdgesmithError(f"this pass needs {what} but none was given.",
                                 "pass --calibration-data FILE (.npy, .npz by input name, or a folder) or "
                                 "PassContext(calibration=...) (API).")
        if isinstance(self.calibration, dict):
            return Feeds({k: check_finite_array(v, f"{what} for input {k!r}") for k, v in self.calibration.items()},
                         batch_axes(self.calibration))
        return check_finite_array(self.calibration, what)


def first_samples(x, n: int):
    """The first ``n`` samples of one array or of each array of a dict."""
    return sample_slice(x, 0, n)


@dataclass
class PassResult:
    artifact: Artifact
    report: PassReport


Handler = Callable[[Artifact, PassConfig, PassContext], PassResult]
_HANDLERS: dict[type, Handler] = {}


def register_pass(config_type: type[PassConfig]) -> Callable[[Handler], Handler]:
    """Decorator: register ``handler`` for ``config_type`` (and make its ``kind`` known)."""
    if not config_type.kind:
        raise ValueError(f"{config_type.__name__} must set a class-level 'kind'")

    def deco(handler: Handler) -> Handler:
        _HANDLERS[config_type] = handler
        PASSES.register(config_type.kind, config_type)
        return handler

    return deco


def apply_pass(artifact: Artifact, config: PassConfig, ctx: PassContext) -> PassResult:
    """Run one pass: check formats, dispatch on the config type, time it."""
    handler = _HANDLERS.get(type(config))
    if handler is None:
        raise EdgesmithError(f"no handler registered for pass {config.kind!r}.", "register one with @register_pass.")
    if artifact.format != config.input_format:
        raise EdgesmithError(
            f"pass {config.kind!r} takes a {config.input_format} model but got {artifact.describe()}.",
            "reorder the passes (export before ONNX passes) or use a pass for this format.",
        )
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = handler(artifact, config, ctx)
    if result.artifact.format == "onnx" and result.artifact.path != artifact.path:
        from edgesmith.compress.onnx_analysis import check_written

        result.report.notes += check_written(result.artifact.path)
    result.report.seconds = time.perf_counter() - t0
    result.artifact.meta["passes"] = list(artifact.meta.get("passes", [])) + [config.kind]
    return result


def run_passes(artifact: Artifact, configs: list[PassConfig], ctx: PassContext) -> tuple[Artifact, list[PassReport]]:
    reports = []
    for cfg in configs:
        res = apply_pass(artifact, cfg, ctx)
        artifact = res.artifact
        reports.append(res.report)
    return artifact, reports
