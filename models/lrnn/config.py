"""Base of the LRNN config dataclasses: validation on construction and a JSON round trip."""
from __future__ import annotations

import dataclasses
import json

from models.common import EdgesmithError


class Config:
    """Mixin for (frozen) dataclasses: ``validate`` runs from ``__post_init__``; ``to_dict``/``from_dict``."""

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
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise EdgesmithError(f"{cls.__name__} has no option(s) {', '.join(unknown)}.",
                                 f"valid options: {', '.join(sorted(names))}.")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
