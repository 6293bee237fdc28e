"""One registry class behind every registry: targets, passes, runtimes, kinds, producers, model sources.

Each package keeps a table of module names (one registration line per module) and a ``Registry`` that
reads it. The modules are imported on the first query, not at import time, so a process that needs one
runtime does not pay for torch, and a module a test (or a plugin) appends to the table is found on the
next query.
"""
from __future__ import annotations

import importlib
from typing import Generic, Iterator, TypeVar

from edgesmith.common.errors import EdgesmithError

T = TypeVar("T")


def import_modules(names) -> None:
    """Import each named module once: how the registries load their entries on first use."""
    for name in names:
        importlib.import_module(name)


def _origin(entry) -> tuple:
    return getattr(entry, "__module__", None), getattr(entry, "__qualname__", id(entry))


class Registry(Generic[T]):
    """Entries by name, registered by the modules a table names.

    ``modules`` is ``"package:ATTRIBUTE"`` (or "" where the entries register in the registry's own module): a tuple of module names (all imported on a query) or a dict
    ``{name: module}`` (only the module of the entry asked for is imported; ``names`` imports nothing).
    ``what`` names an entry in messages ("target", "model kind"); ``listing`` is the command that lists them.
    """

    def __init__(self, what: str, modules: str = "", *, listing: str = ""):
        self.what, self.listing = what, listing
        self._package, _, self._attribute = modules.partition(":")
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` under ``name``; a second, different entry under one name is a programming error."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a non-empty name, got {name!r}")
        old = self._entries.get(name)
        if old is not None and old is not entry and _origin(old) != _origin(entry):  # a reloaded module may re-register
            raise ValueError(f"{self.what} {name!r} registered twice")
        self._entries[name] = entry
        return entry

    def _table(self):
        return getattr(importlib.import_module(self._package), self._attribute) if self._package else ()

    def _load(self, name: str | None = None) -> None:
        table = self._table()
        if isinstance(table, dict):
            import_modules([table[name]] if name is not None else table.values())
        else:
            import_modules(table)

    def names(self) -> list[str]:
        """Every registered name, sorted (for a per-name table: its names, nothing imported)."""
        table = self._table()
        if isinstance(table, dict):
            return sorted(table)
        import_modules(table)
        return sorted(self._entries)

    def in_order(self) -> list[str]:
        """Every registered name in registration order (model sources are tried in this order)."""
        self._load()
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        table = self._table()
        if isinstance(table, dict):
            return name in table
        import_modules(table)
        return name in self._entries

    def find(self, name: str) -> T | None:
        """The entry, or None when no module registers ``name``."""
        if name not in self:
            return None
        self._load(name if isinstance(self._table(), dict) else None)
        return self._entries.get(name)

    def get(self, name: str) -> T:
        """The entry, or one ``EdgesmithError`` that lists the valid names."""
        entry = self.find(name) if isinstance(name, str) else None
        if entry is None:
            see = f" (see `{self.listing}`)" if self.listing else ""
            raise EdgesmithError(f"unknown {self.what} {name!r}.", f"use one of: {', '.join(self.names())}{see}.")
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
