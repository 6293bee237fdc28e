"""Samples of named inputs whose batch axis is not always 0.

A recurrent model's state keeps the model's own layout in calibration data, e.g. (layers, batch, hidden) with its
samples on axis 1; ``Feeds`` carries that axis with the arrays, so whatever slices or batches them (a pass's
calibration reader, the first N samples) cuts every input on its own sample axis.
"""
from __future__ import annotations

import numpy as np


class Feeds(dict):
    """Arrays by input name whose samples lie on ``axes[name]`` where that is not 0: a recurrent state kept in the
    model's own layout, e.g. (layers, batch, hidden). Everything that slices or batches calibration data reads it."""

    def __init__(self, arrays: dict, axes: dict | None = None):
        super().__init__(arrays)
        self.axes = {k: int(a) for k, a in (axes or {}).items() if a and k in arrays}


def batch_axes(x) -> dict:
    """{input: its sample axis} where that is not 0 (``Feeds``), else {}."""
    return dict(getattr(x, "axes", {}))


def n_samples(x) -> int:
    """Samples in calibration data given as one array or as a dict of arrays by input name."""
    if isinstance(x, dict):
        k = next(iter(x))
        return int(np.shape(x[k])[batch_axes(x).get(k, 0)])
    return int(len(x))


def sample_slice(x, start: int, stop: int):
    """Samples ``start:stop`` of one array or of each array of a dict (on each one's sample axis)."""
    if not isinstance(x, dict):
        return x[start:stop]
    axes = batch_axes(x)
    out = {k: np.asarray(v)[(slice(None),) * axes.get(k, 0) + (slice(start, stop),)] for k, v in x.items()}
    return Feeds(out, axes) if axes else out
