"""Shared validators: whole numbers in a range, seeds, finite arrays."""
from __future__ import annotations

import random

import numpy as np

from edgesmith.common.errors import EdgesmithError


def is_int(value, lo: int | None = None, hi: int | None = None) -> bool:
    """A whole number (``True`` is not one, as a config read from JSON or TOML may hold) within ``lo..hi``."""
    return (isinstance(value, int) and not isinstance(value, bool)
            and (lo is None or value >= lo) and (hi is None or value <= hi))


MAX_SEED = 2**63 - 1  # torch.manual_seed takes 64 bits; a wider seed would fail deep inside a run


def check_seed(seed, name: str = "seed") -> int:
    """A seed is a whole number from 0 to ``MAX_SEED``: one error naming it otherwise."""
    if not is_int(seed, 0, MAX_SEED):
        raise EdgesmithError(f"{name} is {seed!r}.", f"use a whole number from 0 to {MAX_SEED} (2**63 - 1).")
    return seed


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and torch (if imported) and return a NumPy generator for local use."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a hard dependency of the main env
        pass
    return np.random.default_rng(seed)


def check_finite_array(x: np.ndarray, what: str) -> np.ndarray:
    """Reject empty or non-finite arrays with a clear message (used for calibration and inputs)."""
    x = np.asarray(x)
    if x.size == 0 or (x.ndim >= 1 and x.shape[0] == 0):
        raise EdgesmithError(f"{what} is empty.", f"provide at least one sample of {what}.")
    if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise EdgesmithError(
            f"{what} contains {bad} NaN or infinite values.",
            f"clean or re-generate {what}; every value must be finite.",
        )
    return x
