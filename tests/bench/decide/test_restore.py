"""Accuracy control: the fewest top-ranked layers restored, found by bisection on validation scores."""
from __future__ import annotations

from edgesmith.bench.decide.restore import ranked_pass, restore
from edgesmith.compress.export_onnx import ExportOnnxConfig
from edgesmith.compress.quant_int8 import Int8QdqConfig
from edgesmith.hardware import Variant

LAYERS = [f"/conv{i}" for i in range(20)]
REPORTS = [{}, {"extra": {"restore_order": [{"layer": n, "noise_added": 1.0 / (i + 1)} for i, n in enumerate(LAYERS)]}}]


def _variant():
    return Variant("int8", [ExportOnnxConfig(), Int8QdqConfig(exclude=("/head",))], ["onnxruntime"], "int8 QDQ")


def _score_by_restored(needed: int):
    """A model whose validation accuracy reaches 0.9 once its ``needed`` top-ranked layers are back in fp32."""
    def score(v):
        restored = [n for n in v.passes[-1].exclude if n in LAYERS]
        assert restored == LAYERS[:len(restored)], "layers are restored in rank order"
        assert "/head" in v.passes[-1].exclude  # the user's own exclusions stay
        return 0.9 if len(restored) >= needed else 0.8

    return score


def test_bisection_finds_the_fewest_layers_that_meet_the_budget_in_few_rebuilds():
    for needed in (1, 7, 20):
        found = restore(_variant(), REPORTS, _score_by_restored(needed), lambda v: v >= 0.9)
        assert found.layers == LAYERS[:needed]
        assert found.variant.name == f"int8-restored{needed}" and found.variant.runtimes == ["onnxruntime"]
        assert found.variant.passes[-1].allow_empty is True  # every layer restored is still a model
        assert len(found.probes) <= 1 + 5  # all layers, then log2(20) bisection steps


def test_a_variant_that_misses_even_with_every_layer_restored_is_given_up():
    found = restore(_variant(), REPORTS, lambda v: 0.5, lambda v: v >= 0.9)
    assert found.variant is None and found.probes == [{"k": 20, "validation": 0.5, "within_budget": False}]


def test_a_variant_whose_passes_rank_no_layers_is_not_searched():
    assert restore(_variant(), [{}, {}], lambda v: 1.0, lambda v: True) is None
    plain = Variant("fp16", [ExportOnnxConfig()], ["onnxruntime"])
    assert ranked_pass(plain, REPORTS[:1]) is None
