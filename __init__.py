"""edgesmith: compress a model for a piece of hardware, export it, run it and measure it honestly.

The repository's five folders are this package's subpackages: ``edgesmith.models``,
``edgesmith.compress``, ``edgesmith.hardware``, ``edgesmith.runtimes`` and ``edgesmith.bench``
(``setup.py`` maps them), so installing edgesmith adds one top-level package, not five.
``import edgesmith`` stays cheap: it imports nothing heavy.
"""
from __future__ import annotations

__version__ = "0.2.0"
