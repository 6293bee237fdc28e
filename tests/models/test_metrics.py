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


def test_binary_accuracy_thresholds_probabilities_per_position():
    from edgesmith.models.metrics import binary

    probs = np.array([[[0.9], [0.2], [0.5]], [[0.1], [0.7], [0.4]]])  # (samples, steps, 1), a VAD's per frame
    labels = np.array([[1, 0, 0], [0, 0, 0]], np.float32)
    value, extra = binary(probs, labels)
    assert value == pytest.approx(4 / 6) and extra["positives"] == pytest.approx(1 / 6)


@pytest.mark.parametrize("probs, labels, needle", [(np.array([[2.0]]), np.array([[1.0]]), "probabilities"),
                                                   (np.array([[0.5]]), np.array([[2.0]]), "0/1 labels")])
def test_binary_accuracy_refuses_logits_and_class_ids(probs, labels, needle):
    from edgesmith.models.metrics import binary

    with pytest.raises(EdgesmithError, match=needle):
        binary(probs, labels)
