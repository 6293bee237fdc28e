"""The OOD-score monitor: KS distance, fp32 reference vs a changed model, the producer hook's checks."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.bench.measure.ood_monitor import ks_distance, ood_entry, ood_reference
from edgesmith.common import EdgesmithError


def test_ks_distance_matches_hand_computed_cdf_gaps():
    assert ks_distance([1, 2, 3], [1, 2, 3]) == 0.0
    assert ks_distance([0, 0], [1, 1]) == 1.0
    # CDFs at 2: 2/3 vs 1/3 -> 1/3 is the largest gap
    assert ks_distance([1, 2, 3], [2, 3, 4]) == pytest.approx(1 / 3)


def test_digits_monitor_sees_no_shift_for_the_same_model_and_a_shift_for_scaled_logits(digits):
    import torch

    predict = lambda x: digits.module(torch.from_numpy(x)).detach().numpy()  # noqa: E731
    ref = ood_reference(digits, predict)
    assert set(ref.sets) == {"id", "noise", "rotated", "inverted"}
    same = ood_entry(digits, predict, ref)
    for s in ("msp", "energy", "mahalanobis"):
        assert same["shift_vs_fp32"][s]["ks_id"] == 0.0
        assert same["id_flag_rate_at_fp32_threshold"][s] == pytest.approx(0.05, abs=0.01)
        assert same["auroc"][s] == ref.entry["auroc"][s]
    # a colder softmax (logits x 3) keeps the argmax but moves every uncertainty score
    hot = ood_entry(digits, lambda x: 3 * predict(x), ref)
    assert hot["shift_vs_fp32"]["msp"]["ks_id"] > 0.3
    assert hot["shift_vs_fp32"]["energy"]["mean_shift_id"] > 0
    assert sum(hot["hist"]["energy"]["id"]) == len(ref.sets["id"])


class _Fake:
    name = "fake"
    input_shape = (2,)

    def __init__(self, sets):
        self.sets = sets

    def ood_inputs(self):
        return self.sets

    def check_input(self, x):
        if x.shape[1:] != (2,):
            raise EdgesmithError("bad shape", "fix it")
        return x


def test_monitor_skips_producers_without_ood_inputs_and_rejects_a_missing_id_set():
    assert ood_reference(_Fake(None), lambda x: x) is None
    with pytest.raises(EdgesmithError):
        ood_reference(_Fake({"noise": np.zeros((4, 2))}), lambda x: x)
    with pytest.raises(EdgesmithError):
        ood_reference(_Fake({"id": np.zeros((4, 2)), "noise": np.zeros((4, 3))}), lambda x: x)
