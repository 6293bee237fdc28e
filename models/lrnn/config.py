"""The LRNN config dataclasses' base: the shared ``edgesmith.common.Config`` mixin (re-exported here,
where other packages first imported it from)."""
from __future__ import annotations

from edgesmith.common import Config

__all__ = ["Config"]
