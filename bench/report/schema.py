"""The deploy report as data: typed records with an exact JSON round trip.

``report.json`` is what a deploy writes; ``DeployReport.load(path)`` reads it back as these records, so a reader
names fields (``row.latency[64].p50``) instead of indexing nested dicts by string. ``to_dict`` gives back the very
dict that was read (``DeployReport.from_dict(d).to_dict() == d``, key order included): keys a record does not model
are kept in its ``more`` and written back in place. Sections whose shape belongs to one producer or runtime (the OOD
monitor's, a simulator's activity counts, the bit-exact check, a cost model's breakdown) stay dicts.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar


def _read(cls, x):
    return cls.from_dict(x) if isinstance(x, dict) else x  # a report of an older shape keeps what it holds


def _write(x):
    return x.to_dict() if isinstance(x, _Record) else x


def _one(cls):
    return (lambda x: _read(cls, x)), _write


def _many(cls):
    return (lambda xs: [_read(cls, x) for x in xs]), (lambda xs: [_write(x) for x in xs])


def _by_batch(cls):
    """A dict keyed by batch size: int keys here, the JSON's strings there."""
    return (lambda d: {int(b): _read(cls, x) for b, x in d.items()}), (lambda d: {str(b): _write(x) for b, x in d.items()})


@dataclass
class _Record:
    """Known fields plus ``more`` (the keys not modelled); only the keys that were read are written back."""

    more: dict = field(default_factory=dict, kw_only=True, repr=False)
    _keys: list = field(default_factory=list, kw_only=True, repr=False, compare=False)
    _nested: ClassVar[dict[str, tuple[Callable, Callable]]] = {}

    @classmethod
    def _names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name not in ("more", "_keys")]

    @classmethod
    def from_dict(cls, d: dict):
        names = cls._names()
        kw = {}
        for k in names:
            if k in d:
                conv = cls._nested.get(k)
                kw[k] = conv[0](d[k]) if conv is not None and d[k] is not None else d[k]
        return cls(**kw, more={k: v for k, v in d.items() if k not in names}, _keys=list(d))

    def to_dict(self) -> dict:
        out = {}
        for k in self._names():
            if self._keys and k not in self._keys:
                continue  # a field the JSON did not have stays out, so the file comes back as it was
            v = getattr(self, k)
            conv = self._nested.get(k)
            out[k] = conv[1](v) if conv is not None and v is not None else v
        out.update(self.more)
        order = self._keys or list(out)
        return {k: out[k] for k in order if k in out} | {k: v for k, v in out.items() if k not in order}


@dataclass
class Evaluation(_Record):
    """A producer's score of one model (``models.base.Evaluation.to_dict``); ``extra``: its further figures."""

    metric: str = ""
    value: float = 0.0
    higher_is_better: bool = True
    unit: str = ""
    n_samples: int = 0
    extra: dict = field(default_factory=dict)


@dataclass
class Timing(_Record):
    """One batch size's latency: ``provenance`` "measured" (with its distribution) or "estimated" (with its model)."""

    provenance: str = ""
    p50: float = 0.0
    p90: float | None = None
    p99: float | None = None
    cv: float | None = None
    n: int | None = None
    peak_rss_bytes: int | None = None
    samples_s: list | None = None


@dataclass
class SpeedFigure(_Record):
    name: str = ""
    value: float = 0.0
    unit: str = ""
    higher_is_better: bool = True
    provenance: str = ""


@dataclass
class Energy(_Record):
    provenance: str = ""
    energy_j_per_sample: float | None = None
    method: str | None = None
    per: str = "sample"


@dataclass
class ResultRow(_Record):
    """One variant in one runtime: its score, size, latency and speed per batch size, energy."""

    variant: str = ""
    runtime: str = ""
    runtime_label: str = ""
    evaluation: Evaluation = field(default_factory=Evaluation)
    size_bytes: int = 0
    bits_per_weight: float | None = None
    max_abs_diff: float | None = None
    latency: dict[int, Timing] = field(default_factory=dict)
    speed: dict[int, SpeedFigure] = field(default_factory=dict)
    energy: Energy = field(default_factory=Energy)
    ood: dict | None = None  # the OOD monitor's section (bench.measure.ood_monitor)
    activity: dict | None = None  # a simulator's activity counts per sample
    bit_exact_reference: dict | None = None  # the check against a bit-exact twin runtime
    _nested: ClassVar = {"evaluation": _one(Evaluation), "latency": _by_batch(Timing), "speed": _by_batch(SpeedFigure),
                         "energy": _one(Energy)}


@dataclass
class Layer(_Record):
    name: str = ""
    action: str = ""
    bits_per_weight: float | None = None
    n_params: int | None = None
    error: dict = field(default_factory=dict)
    reason: str | None = None
    graph: str | None = None


@dataclass
class PassEntry(_Record):
    """What one pass did to one variant (``compress.base.PassReport.to_dict``)."""

    config: dict = field(default_factory=dict)
    input_format: str = ""
    output_format: str = ""
    size_before_bytes: int = 0
    size_after_bytes: int = 0
    bits_per_weight: float | None = None
    layers: list[Layer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    skipped_layers: list[str] = field(default_factory=list)
    _nested: ClassVar = {"layers": _many(Layer)}

    @property
    def kind(self) -> str:
        return self.config.get("kind", "")


@dataclass
class VariantEntry(_Record):
    name: str = ""
    passes: list[dict] = field(default_factory=list)
    runtimes: list[str] = field(default_factory=list)
    description: str = ""
    artifact: str | None = None
    pass_reports: list[PassEntry] = field(default_factory=list)
    _nested: ClassVar = {"pass_reports": _many(PassEntry)}


@dataclass
class CoefficientEntry(_Record):
    name: str = ""
    value: float = 0.0
    unit: str = ""
    source: str = ""
    note: str = ""


@dataclass
class TargetInfo(_Record):
    name: str = ""
    cost_model: str = ""
    coefficients: list[CoefficientEntry] = field(default_factory=list)
    _nested: ClassVar = {"coefficients": _many(CoefficientEntry)}


@dataclass
class PlanInfo(_Record):
    target: str = ""
    latency_provenance: str = ""
    notes: list[str] = field(default_factory=list)
    not_built: dict[str, str] = field(default_factory=dict)  # variant -> why (reports since 2026-12-07)


@dataclass
class Reference(_Record):
    runtime: str = "torch"
    format: str = "torch"
    evaluation: Evaluation = field(default_factory=Evaluation)
    size_bytes: int = 0
    _nested: ClassVar = {"evaluation": _one(Evaluation)}


@dataclass
class FailedRun(_Record):
    variant: str = ""
    runtime: str = ""
    runtime_label: str = ""
    error: str = ""


@dataclass
class DeployReport(_Record):
    """What one deploy measured: the model, its kind and target, the reference and one row per variant x runtime."""

    model: str = ""
    kind: dict = field(default_factory=dict)
    target: TargetInfo = field(default_factory=TargetInfo)
    date: str = ""
    seed: int = 0
    threads: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    unit: str = "sample"
    options: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    plan: PlanInfo = field(default_factory=PlanInfo)
    latency_method: str = ""
    reference: Reference = field(default_factory=Reference)
    ood_reference: dict | None = None
    variants: list[VariantEntry] = field(default_factory=list)
    results: list[ResultRow] = field(default_factory=list)
    failed_runs: list[FailedRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    _nested: ClassVar = {"target": _one(TargetInfo), "plan": _one(PlanInfo), "reference": _one(Reference),
                         "variants": _many(VariantEntry), "results": _many(ResultRow), "failed_runs": _many(FailedRun)}

    @property
    def kind_name(self) -> str:
        return self.kind.get("name", "tensor")

    @property
    def target_name(self) -> str:
        return self.target.name

    @property
    def model_options(self) -> dict:
        return (self.options or {}).get("model_options") or {}

    def row(self, variant: str, runtime: str) -> ResultRow | None:
        return next((r for r in self.results if r.variant == variant and r.runtime == runtime), None)

    @classmethod
    def load(cls, path: str | Path) -> "DeployReport":
        return cls.from_dict(json.loads(Path(path).read_text()))


def as_report(report: Any) -> DeployReport:
    """A ``DeployReport`` from one, or from the dict a deploy builds."""
    return report if isinstance(report, DeployReport) else DeployReport.from_dict(report)


# --- the sweep's merged report (sweep.json) -------------------------------------------------------------------

@dataclass
class SweepRun(_Record):
    recipe: str = ""
    ran: int = 0
    cached: int = 0
    failed: int = 0
    wall_s: float = 0.0
    workers: int | None = None
    ray: str | None = None
    threads_per_cell: int = 1


@dataclass
class SweepCell(_Record):
    index: int = 0
    key: str = ""
    params: dict = field(default_factory=dict)
    spec: dict = field(default_factory=dict)
    status: str = ""
    wall_s: float | None = None
    error: str | None = None


@dataclass
class SweepRow(_Record):
    """One variant in one runtime of one cell, with the costs a Pareto front is drawn against."""

    cell: int = 0
    key: str = ""
    params: dict = field(default_factory=dict)
    model: str = ""
    target: str = ""
    variant: str = ""
    runtime: str = ""
    metric: str = ""
    higher_is_better: bool = True
    value: float = 0.0
    size_bytes: int = 0
    latency_s: float | None = None
    latency_provenance: str | None = None
    energy_j: float | None = None
    energy_provenance: str | None = None
    energy_per: str = "sample"

    def cost(self, name: str) -> float | None:
        """The cost a front is drawn against: size_bytes, latency_s or energy_j."""
        if name not in ("size_bytes", "latency_s", "energy_j"):
            raise ValueError(f"no cost {name!r}")
        return getattr(self, name)


@dataclass
class Front(_Record):
    target: str = ""
    metric: str = ""
    cost: str = ""
    provenance: str = ""
    rows: list[int] = field(default_factory=list)


@dataclass
class SweepReport(_Record):
    run: SweepRun = field(default_factory=SweepRun)
    cells: list[SweepCell] = field(default_factory=list)
    rows: list[SweepRow] = field(default_factory=list)
    fronts: list[Front] = field(default_factory=list)
    _nested: ClassVar = {"run": _one(SweepRun), "cells": _many(SweepCell), "rows": _many(SweepRow),
                         "fronts": _many(Front)}

    @classmethod
    def load(cls, path: str | Path) -> "SweepReport":
        return cls.from_dict(json.loads(Path(path).read_text()))


def as_sweep_report(report: Any) -> SweepReport:
    return report if isinstance(report, SweepReport) else SweepReport.from_dict(report)
