"""Model kinds: what sort of model a producer (or a user's model source) hands to the pipeline.

A kind owns what differs between model families and nothing else: the input/output contract a
producer of that kind must honour, its options (one config dataclass, reached from the CLI with
``--option KEY=VALUE`` and from a recipe's ``[options]`` table), the batch sizes it is timed at, and
how one timed call turns into its speed figure (samples/s, tokens/s, real-time factor). Targets own
the plan for each kind they support; ``bench.pipeline.deploy`` runs every kind through the same pipeline.

Registration: one line per kind module in ``models.kinds.KIND_MODULES``; each module defines one
``@register_kind`` class.
"""
from __future__ import annotations

import dataclasses
from abc import ABC
from dataclasses import dataclass
from typing import ClassVar

from edgesmith.common import Config, EdgesmithError
from edgesmith.common.registry import Registry


@dataclass(frozen=True)
class KindOptions(Config):
    """Base of every kind's options dataclass (validated on construction, JSON round trip)."""

    @classmethod
    def field_help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def option(default, help: str, **kw):
    """A kind option: a dataclass field with its one-line help (shown by ``edgesmith kinds``)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("kind options hold immutable defaults (use a tuple)")
    return dataclasses.field(default=default, metadata={"help": help}, **kw)


@dataclass(frozen=True)
class NoOptions(KindOptions):
    """A kind without options."""


@dataclass(frozen=True)
class Speed:
    """One timed call turned into the kind's figure: ``value`` in ``unit`` (e.g. 812.0 tokens/s)."""

    name: str
    value: float
    unit: str
    higher_is_better: bool = True

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class Kind(ABC):
    """A model kind. Subclasses set the class attributes and may override the hooks."""

    name: ClassVar[str]
    description: ClassVar[str]
    unit: ClassVar[str] = "sample"  # what one energy/speed figure is per: "sample", "token", "clip"
    default_batch_sizes: ClassVar[tuple[int, ...]] = (1, 64)
    default_n_calibration: ClassVar[int] = 128  # calibration samples a deploy draws unless told otherwise
    # axis of one sample along which the model runs step by step (stream frames), or None; estimates of
    # whole-sample graphs on dense accelerators then count one kernel launch per layer and step
    sequential_axis: ClassVar[int | None] = None
    variable_length: ClassVar[bool] = False  # inputs of any length along axis 0 of a sample (token sequences)
    probe_samples: ClassVar[int] = 16  # samples whose outputs every variant is compared on (max abs diff)
    Options: ClassVar[type[KindOptions]] = NoOptions
    export_pass: ClassVar[str] = "export-onnx"  # the pass that writes a torch model of this kind to a file
    # what a producer of this kind must have besides the Producer base: (attribute, what it is)
    required: ClassVar[tuple[tuple[str, str], ...]] = ()

    def check_producer(self, producer) -> None:
        """Refuse a producer that does not honour this kind's contract, naming what is missing."""
        missing = [f"{attr} ({what})" for attr, what in self.required if not hasattr(producer, attr)]
        if missing:
            raise EdgesmithError(f"{producer.name} declares kind {self.name!r} but lacks {'; '.join(missing)}.",
                                 "implement them on the producer, or declare the kind that fits it.")

    def options(self, given: dict | None) -> KindOptions:
        """The kind's options from ``--option``/``[options]`` values (unknown keys are refused)."""
        given = dict(given or {})
        names = {f.name for f in dataclasses.fields(self.Options)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise EdgesmithError(f"kind {self.name!r} has no option(s) {', '.join(unknown)}.",
                                 f"valid options for {self.name} models: {', '.join(sorted(names)) or '(none)'} "
                                 "(see `edgesmith kinds`).")
        return self.Options.from_dict(given)

    def speed(self, p50_s: float, batch: int, producer, artifact) -> Speed:
        """The kind's speed figure for one call on ``batch`` items that took ``p50_s`` seconds."""
        return Speed("throughput", batch / p50_s, f"{self.unit}s/s")

    def describe(self) -> dict:
        return {"name": self.name, "description": self.description, "unit": self.unit,
                "default_batch_sizes": list(self.default_batch_sizes),
                "default_n_calibration": self.default_n_calibration, "export_pass": self.export_pass,
                "options": {f.name: {"default": f.default, "help": f.metadata.get("help", "")}
                            for f in dataclasses.fields(self.Options)},
                "producer_contract": [f"{a}: {w}" for a, w in self.required]}


KINDS: Registry[type[Kind]] = Registry("model kind", "edgesmith.models.kinds:KIND_MODULES")


def register_kind(cls: type[Kind]) -> type[Kind]:
    return KINDS.register(cls.name, cls)


def kind_names() -> list[str]:
    return KINDS.names()


def get_kind(name: str) -> Kind:
    return KINDS.get(name)()
