"""Config dataclass base for the OOD and TSV producers: validation on construction, JSON round trip."""
from __future__ import annotations

import json

from edgesmith.common import Config as BaseConfig
from edgesmith.common.checks import is_int


class Config(BaseConfig):
    """The shared config mixin (``edgesmith.common.Config``) plus the range checks of the OOD and TSV configs."""

    def _need_int(self, name: str, lo: int, hi: int | None = None) -> None:
        v = getattr(self, name)
        if not is_int(v, lo) or (hi is not None and v > hi):
            upper = f" to {hi}." if hi is not None else " up."
            self._fail(name, f"is {v!r}", f"use a whole number from {lo}{upper}")

    def _need_float(self, name: str, lo: float, hi: float | None = None, *, open_lo: bool = True) -> None:
        v = getattr(self, name)
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and v == v and abs(v) != float("inf")
        ok = ok and (v > lo if open_lo else v >= lo) and (hi is None or v <= hi)
        if not ok:
            rng = f"{'above' if open_lo else 'at least'} {lo}" + (f" and at most {hi}" if hi is not None else "")
            self._fail(name, f"is {v!r}", f"use a finite number {rng}.")

    @classmethod
    def from_json(cls, s: str):
        return cls.from_dict(json.loads(s))
