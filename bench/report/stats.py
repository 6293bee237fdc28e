"""Statistics the reports and studies share: a mean with its 95% Student-t interval over repeated runs (seeds)."""
from __future__ import annotations

import math

import numpy as np

from edgesmith.common import EdgesmithError


def interval(values) -> dict:
    """Mean, sample SD and the 95% Student-t half-width of ``values`` (half-width 0 for one value: a method that
    reads no calibration data has nothing to vary over seeds)."""
    from scipy import stats

    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        raise EdgesmithError("no values to summarise.", "run the sweep's cells first.")
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    half = float(stats.t.ppf(0.975, len(v) - 1) * sd / math.sqrt(len(v))) if len(v) > 1 else 0.0
    return {"mean": float(v.mean()), "sd": sd, "ci95": half, "n": int(len(v))}
