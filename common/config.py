"""The config mixin of every pass, kind and model config: validated on construction, JSON round trip."""
from __future__ import annotations

import dataclasses
import json


from edgesmith.common.errors import EdgesmithError


class Config:
    """Mixin for (frozen) config dataclasses: ``validate`` runs from ``__post_init__`` and reports a bad
    field through ``_fail`` as an ``EdgesmithError``; ``to_dict``/``to_json``/``from_dict`` round-trip
    through JSON (lists come back as tuples), so a cache key, a claim table and a report name the same thing."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ``EdgesmithError`` (through ``_fail``) on a bad field."""

    def _fail(self, field_name: str, problem: str, fix: str) -> None:
        raise EdgesmithError(f"{type(self).__name__}.{field_name} {problem}.", fix)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict):
        """Lists come back as tuples, and one value given for a list field is a list of one (``--option bits=3``
        means bits [3], ``--option methods=rwkv-gptq`` methods ["rwkv-gptq"], not its letters)."""
        fields = dataclasses.fields(cls)
        names = {f.name for f in fields}
        unknown = sorted(set(d) - names)
        if unknown:
            raise EdgesmithError(f"{cls.__name__} has no option(s) {', '.join(unknown)}.",
                                 f"valid options: {', '.join(sorted(names))}.")
        listed = {f.name for f in fields if isinstance(f.default, tuple)}
        return cls(**{k: tuple(v) if isinstance(v, list) else (v,) if k in listed and isinstance(v, (str, int, float))
                      else v for k, v in d.items()})
