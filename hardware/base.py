"""Targets: a piece of hardware, the formats it runs, and a cost model with cited coefficients.

A target decides the plan for a model: which compression variants apply (each a list of pass
configs), which runtime runs them, and how latency and energy are obtained: ``measured`` on this
machine (host CPU latency) or ``estimated`` from the target's cost model. Every coefficient of a
cost model is a ``Coefficient`` carrying its value, unit and public source, so a report can say
exactly where each estimated figure came from.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Callable, ClassVar

from edgesmith.compress.base import PassConfig
from edgesmith.common import EdgesmithError
from edgesmith.common.checks import is_int
from edgesmith.common.registry import Registry


@dataclass(frozen=True)
class Coefficient:
    name: str
    value: float
    unit: str
    source: str
    note: str = ""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v != ""}


@dataclass
class Workload:
    """What one inference (one sample, or one time step for streaming models) costs in operations.

    Dense accelerators read ``macs``/``weight_bytes``/``activation_bytes``; neuromorphic ones read the
    activity counts a simulator reports (``synops``, ``neuron_updates``, ``messages``) over
    ``timesteps`` steps. ``precision`` is the arithmetic the kernels use ("fp32", "int8", "int4",
    "fixed").
    """

    macs: float = 0.0
    weight_bytes: float = 0.0
    activation_bytes: float = 0.0
    precision: str = "fp32"
    n_layers: int = 0
    batch: int = 1
    synops: float = 0.0
    neuron_updates: float = 0.0
    messages: float = 0.0
    timesteps: int = 1
    source: str = ""  # how these counts were obtained (graph analysis, simulator counters, ...)
    measured_latency_s: float | None = None  # wall time of one call on `batch` samples, when measured here
    # neuromorphic: per layer (one Lava process each) {name, neurons, synapses, dense_synapses, synops,
    # neuron_updates, messages}, counts per sample; a core-mapping cost model places them on cores
    layers: tuple = ()

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Estimate:
    """A figure set that came from a cost model (never from a meter on this machine)."""

    energy_j: float
    latency_s: float
    breakdown: dict
    coefficients: list[Coefficient]
    model: str
    provenance: str = "estimated"

    def to_dict(self) -> dict:
        return {
            "provenance": self.provenance,
            "model": self.model,
            "energy_j": self.energy_j,
            "latency_s": self.latency_s,
            "breakdown": self.breakdown,
            "coefficients": [c.to_dict() for c in self.coefficients],
        }


class CostModel(ABC):
    """Latency and energy estimates from a ``Workload``; subclasses list their ``coefficients``."""

    name: ClassVar[str]

    @property
    @abstractmethod
    def coefficients(self) -> dict[str, Coefficient]:
        ...

    @abstractmethod
    def estimate(self, work: Workload) -> Estimate:
        ...

    def c(self, key: str) -> float:
        return self.coefficients[key].value

    def used(self, *keys: str) -> list[Coefficient]:
        return [self.coefficients[k] for k in keys]


@dataclass
class Variant:
    """One compressed form of the model the target can run: a name and the passes that make it."""

    name: str
    passes: list[PassConfig]
    runtimes: list[str]
    description: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "passes": [p.to_dict() for p in self.passes], "runtimes": self.runtimes,
                "description": self.description}


@dataclass
class Plan:
    target: str
    variants: list[Variant]
    latency_provenance: str  # "measured" or "estimated"
    notes: list[str] = field(default_factory=list)
    # variants the target would build that this model or these options rule out, each with why: shown at the top
    # of the report and printed by the CLI, so a missing int8 row is never found only at the end of a page
    not_built: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"target": self.target, "latency_provenance": self.latency_provenance,
                "variants": [v.to_dict() for v in self.variants], "notes": self.notes, "not_built": self.not_built}


@dataclass
class PlanOptions:
    """User choices that shape a plan (from CLI flags or a recipe).

    ``options`` are the model kind's own options (``--option KEY=VALUE``, a recipe's ``[options]``),
    checked against the kind's options dataclass when the plan is made (``models.kinds``).
    """

    # TVM rows: True adds untuned ones, False leaves TVM out, None (default) runs TVM only where asked for by
    # tvm_records or tvm_tune_trials (an untuned build costs compile time and rarely beats onnxruntime)
    tvm: bool | None = None
    tvm_tune_trials: int = 0  # 0: no fresh tuning
    tvm_records: bool = False  # also a TVM row scheduled from tuning records (shipped, or cached by a fresh tune)
    variants: tuple[str, ...] = ()  # empty: all the target offers
    # more runtimes asked for (e.g. "openvino"): the deploy adds each to every variant whose file it loads, on a
    # target whose latency is measured on this machine (bench.pipeline.plans.with_runtimes)
    runtimes: tuple[str, ...] = ()
    options: dict = field(default_factory=dict)
    # the user gave data to fine-tune on or a training function (--train-data, train_fn): training variants (QAT)
    # are offered for a model whose producer has no training data of its own
    training_given: bool = False

    def __post_init__(self):
        self.variants = tuple(self.variants)
        self.runtimes = tuple(self.runtimes)
        if self.tvm is not None and not isinstance(self.tvm, bool):
            raise EdgesmithError(f"plan option tvm is {self.tvm!r}.", "use true, false, or leave it out (only when asked).")
        for name in ("tvm_records", "training_given"):
            if not isinstance(getattr(self, name), bool):
                raise EdgesmithError(f"plan option {name} is {getattr(self, name)!r}.", "use true or false.")
        n = self.tvm_tune_trials
        if not is_int(n, 0):
            raise EdgesmithError(f"tvm_tune_trials is {n!r}.", "use a whole number >= 0 (0: no fresh tuning).")
        if any(not isinstance(v, str) for v in self.variants):
            raise EdgesmithError(f"variants {list(self.variants)!r} are not all names.", "list variant names, e.g. fp32.")
        if any(not isinstance(r, str) for r in self.runtimes):
            raise EdgesmithError(f"runtimes {list(self.runtimes)!r} are not all names.",
                                 "list runtime names, e.g. openvino (see `edgesmith runtimes`).")
        if not isinstance(self.options, dict):
            raise EdgesmithError(f"options is {self.options!r}, not a table.", "give KEY=VALUE options.")

    @property
    def wants_tvm(self) -> bool:
        """Whether TVM rows are built: asked for outright, or by records or fresh tuning."""
        return self.tvm if self.tvm is not None else bool(self.tvm_records or self.tvm_tune_trials > 0)

    def to_dict(self) -> dict:
        return asdict(self)


# "target/kind" -> a model family's plan for that pair (hardware/families/), beside the target's own planners
FAMILY_PLANS: Registry[Callable[..., "Plan"]] = Registry("family plan", "edgesmith.hardware.families:FAMILY_PLAN_MODULES")


def register_plan(target: str, kind: str):
    """Decorator: ``fn(target, producer, options, kind_options) -> Plan`` plans ``kind`` models on ``target``."""
    def deco(fn):
        return FAMILY_PLANS.register(f"{target}/{kind}", fn)

    return deco


class Target(ABC):
    """A deployment target. Subclasses are registered with ``@register_target``."""

    name: ClassVar[str]
    description: ClassVar[str]
    numeric_formats: ClassVar[tuple[str, ...]]
    memory_budget_bytes: ClassVar[int]
    memory_budget_source: ClassVar[str]
    runtime: ClassVar[str]  # the runtime that runs the deployed artifact
    export_format: ClassVar[str]
    latency_provenance: ClassVar[str]  # "measured" here, or "estimated" (no device on this machine)
    # model kind -> the function that plans its variants (set at the end of the class body, after the methods);
    # a model family adds its own for this target with @register_plan (hardware/families/). ``planner`` is the
    # one place a deploy goes from a kind to its plan
    planners: ClassVar[dict[str, Callable[..., "Plan"]]] = {}
    # kinds it refuses, each with the reason shown to the user
    refused_kinds: ClassVar[dict[str, str]] = {}
    # formats a model may arrive in for this target's plans to start from (a producer's native_format)
    source_formats: ClassVar[tuple[str, ...]] = ("torch", "onnx", "trees")

    @property
    @abstractmethod
    def cost_model(self) -> CostModel:
        ...

    def plan(self, producer, options: PlanOptions) -> Plan:
        """The variants to build for ``producer`` and the runtimes that run each (by the producer's kind)."""
        from edgesmith.models.kinds import get_kind

        kind = get_kind(producer.kind)
        self.check_kind(kind.name, producer.name)
        self.check_source_format(producer.native_format, producer.name)
        kind_options = kind.options(options.options)
        return self.planner(kind.name)(self, producer, options, kind_options)

    def planner(self, kind: str) -> Callable[..., "Plan"]:
        """The function that plans ``kind`` models here: the target's own, else a model family's."""
        own = self.planners.get(kind)
        return own if own is not None else FAMILY_PLANS.get(f"{self.name}/{kind}")

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds this target plans: its own planners' and those model families add for it."""
        added = [n.partition("/")[2] for n in FAMILY_PLANS.names() if n.partition("/")[0] == self.name]
        return tuple(self.planners) + tuple(k for k in added if k not in self.planners)

    def check_kind(self, kind: str, what: str = "this model") -> None:
        """Refuse a model kind this target has no plan for, with the reason and the targets that have one."""
        if kind in self.kinds:
            return
        others = [n for n in target_names() if kind in get_target(n).kinds]
        why = self.refused_kinds.get(kind, f"it has no plan for {kind} models")
        raise EdgesmithError(f"{self.name} cannot run {what}, a {kind} model: {why}.",
                             f"deploy it to {' or '.join(others)}." if others else "no target runs this kind yet.")

    def check_source_format(self, fmt: str, what: str = "this model") -> None:
        """Refuse a model that arrives in a format none of this target's plans start from."""
        if fmt in self.source_formats:
            return
        others = [n for n in target_names() if fmt in TARGETS.get(n).source_formats]
        raise EdgesmithError(f"{self.name} cannot start from {what}, a {fmt} file: its plans start from "
                             f"{', '.join(self.source_formats)} models.",
                             f"deploy it to {' or '.join(others)}." if others else "convert it to one of those formats.")

    def check_fits(self, size_bytes: int, what: str) -> None:
        if size_bytes > self.memory_budget_bytes:
            raise EdgesmithError(
                f"{what} needs {size_bytes / 2**20:.1f} MiB but {self.name} has a budget of "
                f"{self.memory_budget_bytes / 2**20:.1f} MiB.",
                "compress further (int4, pruning) or pick a target with more memory.",
            )

    def describe(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "numeric_formats": list(self.numeric_formats),
            "memory_budget_bytes": self.memory_budget_bytes,
            "memory_budget_source": self.memory_budget_source,
            "runtime": self.runtime,
            "export_format": self.export_format,
            "latency_provenance": self.latency_provenance,
            "kinds": list(self.kinds),
            "refused_kinds": dict(self.refused_kinds),
            "source_formats": list(self.source_formats),
            "cost_model": self.cost_model.name,
            "coefficients": [c.to_dict() for c in self.cost_model.coefficients.values()],
        }


TARGETS: Registry[type[Target]] = Registry("target", "edgesmith.hardware:TARGET_MODULES", listing="edgesmith targets")


def register_target(cls: type[Target]) -> type[Target]:
    return TARGETS.register(cls.name, cls)


def target_names() -> list[str]:
    return TARGETS.names()


def get_target(name: str) -> Target:
    return TARGETS.get(name)()
