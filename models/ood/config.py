"""Config dataclass base for the OOD and TSV producers: validation on construction, JSON round trip."""
from __future__ import annotations

import dataclasses
import json

from models.common import EdgesmithError


class Config:
    """Mixin for frozen dataclasses: ``validate`` runs from ``__post_init__``; ``to_dict``/``from_dict``."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ``EdgesmithError`` (through ``_fail``) on a bad field."""

    def _fail(self, field_name: str, problem: str, fix: str) -> None:
        raise EdgesmithError(f"{type(self).__name__}.{field_name} {problem}.", fix)

    def _need_int(self, name: str, lo: int, hi: int | None = None) -> None:
        v = getattr(self, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
            upper = f" to {hi}." if hi is not None else " up."
            self._fail(name, f"is {v!r}", f"use a whole number from {lo}{upper}")

    def _need_float(self, name: str, lo: float, hi: float | None = None, *, open_lo: bool = True) -> None:
        v = getattr(self, name)
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and v == v and abs(v) != float("inf")
        ok = ok and (v > lo if open_lo else v >= lo) and (hi is None or v <= hi)
        if not ok:
            rng = f"{'above' if open_lo else 'at least'} {lo}" + (f" and at most {hi}" if hi is not None else "")
            self._fail(name, f"is {v!r}", f"use a finite number {rng}.")

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

    @classmethod
    def from_json(cls, s: str):
        return cls.from_dict(json.loads(s))
