"""The LRNN config dataclasses' base: the shared ``models.common.Config`` mixin (re-exported here,
where other packages first imported it from)."""
from __future__ import annotations

from models.common import Config

__all__ = ["Config"]
