"""The deploy report as data: typed records with an exact JSON round trip.

``report.json`` is what a deploy writes; ``DeployReport.load(path)`` reads it back as these records, so a reader
names fields (``row.latency[64].p50``) instead of indexing nested dicts by string. ``to_dict`` gives back the very
dict that was read (``DeployReport.from_dict(d).to_dict() == d``): fields a record does not model are kept in its
``extra`` and written back in place. Sections that vary by kind and target (a per-variant OOD section, Lava activity
counts, a target's cost-model breakdown) stay dicts inside ``extra``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


def _split(cls, d: dict) -> tuple[dict, dict]:
    names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
    return {k: d[k] for k in names if k in d}, {k: v for k, v in d.items() if k not in names}


def _merge(known: dict, extra: dict, order: list[str]) -> dict:
    """Known fields and extra keys, in the order the dict was read in (so the JSON comes back byte for byte)."""
    out = {**known, **extra}
    return {k: out[k] for k in order if k in out} | {k: v for k, v in out.items() if k not in order}


@dataclass
class Evaluation:
    """A producer's score of one model (``models.base.Evaluation.to_dict``); ``extra``: its other figures."""

    metric: str
    value: float
    higher_is_better: bool = True
    unit: str = ""
    n_samples: int = 0
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "Evaluation":
        return cls(**d)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if not self.extra:
            del d["extra"]
        return d


@dataclass
class Timing:
    """One batch size's latency: ``provenance`` "measured" (with the distribution in ``extra``) or "estimated"."""

    provenance: str
    p50: float
    extra: dict = field(default_factory=dict)
    _order: list = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Timing":
        known, extra = _split(cls, d)
        known.pop("_order", None)
        return cls(**known, extra=extra, _order=list(d))

    def to_dict(self) -> dict:
        return _merge({"provenance": self.provenance, "p50": self.p50}, self.extra, self._order)


@dataclass
class SpeedFigure:
    name: str
    value: float
    unit: str
    higher_is_better: bool
    provenance: str

    @classmethod
    def from_dict(cls, d: dict) -> "SpeedFigure":
        return cls(**d)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ResultRow:
    """One variant in one runtime: its score, size, latency and speed per batch size, energy."""

    variant: str
    runtime: str
    runtime_label: str
    evaluation: Evaluation
    size_bytes: int
    latency: dict[int, Timing]
    speed: dict[int, SpeedFigure]
    energy: dict
    extra: dict = field(default_factory=dict)
    _order: list = field(default_factory=list, repr=False, compare=False)

    @property
    def energy_provenance(self) -> str:
        return self.energy.get("provenance", "")

    @property
    def energy_j_per_unit(self) -> float | None:
        return self.energy.get("energy_j_per_sample")

    @classmethod
    def from_dict(cls, d: dict) -> "ResultRow":
        known, extra = _split(cls, d)
        known.pop("_order", None)
        known["evaluation"] = Evaluation.from_dict(known["evaluation"])
        known["latency"] = {int(b): Timing.from_dict(e) for b, e in known["latency"].items()}
        known["speed"] = {int(b): SpeedFigure.from_dict(s) for b, s in known.get("speed", {}).items()}
        return cls(**known, extra=extra, _order=list(d))

    def to_dict(self) -> dict:
        known = {"variant": self.variant, "runtime": self.runtime, "runtime_label": self.runtime_label,
                 "evaluation": self.evaluation.to_dict(), "size_bytes": self.size_bytes,
                 "latency": {str(b): t.to_dict() for b, t in self.latency.items()},
                 "speed": {str(b): s.to_dict() for b, s in self.speed.items()}, "energy": self.energy}
        return _merge(known, self.extra, self._order)


@dataclass
class Reference:
    runtime: str
    format: str
    evaluation: Evaluation
    size_bytes: int

    @classmethod
    def from_dict(cls, d: dict) -> "Reference":
        return cls(d["runtime"], d["format"], Evaluation.from_dict(d["evaluation"]), d["size_bytes"])

    def to_dict(self) -> dict:
        return {"runtime": self.runtime, "format": self.format, "evaluation": self.evaluation.to_dict(),
                "size_bytes": self.size_bytes}


@dataclass
class DeployReport:
    """What one deploy measured: the model, its kind and target, the reference and one row per variant x runtime."""

    model: str
    kind: dict
    target: dict
    seed: int
    batch_sizes: list[int]
    unit: str
    reference: Reference
    results: list[ResultRow]
    options: dict = field(default_factory=dict)
    variants: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    _order: list = field(default_factory=list, repr=False, compare=False)

    @property
    def kind_name(self) -> str:
        return self.kind["name"]

    @property
    def target_name(self) -> str:
        return self.target["name"]

    @property
    def model_options(self) -> dict:
        return (self.options or {}).get("model_options") or {}

    def row(self, variant: str, runtime: str) -> ResultRow | None:
        return next((r for r in self.results if r.variant == variant and r.runtime == runtime), None)

    @classmethod
    def from_dict(cls, d: dict) -> "DeployReport":
        known, extra = _split(cls, d)
        known.pop("_order", None)
        known["reference"] = Reference.from_dict(known["reference"])
        known["results"] = [ResultRow.from_dict(r) for r in known["results"]]
        return cls(**known, extra=extra, _order=list(d))

    @classmethod
    def load(cls, path: str | Path) -> "DeployReport":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict:
        known = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("extra", "_order")}
        known["reference"] = self.reference.to_dict()
        known["results"] = [r.to_dict() for r in self.results]
        return _merge(known, self.extra, self._order)
