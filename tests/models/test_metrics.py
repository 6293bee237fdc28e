"""Metrics: fidelity (output SQNR against the fp32 model) is defined only where the fp32 outputs carry a signal."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.common import EdgesmithError
from edgesmith.models.metrics import SQNR_CAP, fidelity


def test_fidelity_is_the_capped_sqnr_of_the_outputs_against_the_reference():
    ref = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    assert fidelity(ref, ref) == (SQNR_CAP, {"max_abs_error": 0.0, "identical": True})
    value, extra = fidelity(ref + 0.01 * ref, ref)  # noise power 1e-4 of the signal: 40 dB
    assert value == pytest.approx(40.0, abs=1e-3) and not extra["identical"]


def test_fidelity_against_all_zero_outputs_is_an_error_not_a_perfect_score():
    # a randomly initialised classifier with a zero-initialised head outputs zeros: every variant would "match" it
    zero = np.zeros((8, 5), np.float32)
    for out in (zero, zero + 1e-3):
        with pytest.raises(EdgesmithError, match="all zero, so fidelity"):
            fidelity(out, zero)
