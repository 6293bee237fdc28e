"""Plans: which variants each target builds, with which passes and runtimes, and filtering by name."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

from edgesmith.compress.export_netx import ExportNetxConfig
from edgesmith.compress.export_onnx import ExportOnnxConfig
from edgesmith.compress.prune import MagnitudePruneConfig
from edgesmith.compress.quant_int4 import Int4WeightOnlyConfig
from edgesmith.compress.quant_int8 import Int8QdqConfig
from edgesmith.hardware import PlanOptions, get_target
from edgesmith.common import EdgesmithError
from edgesmith.models.kinds.tensor import INT8_WEIGHT_OP_TYPES

PRODUCER = SimpleNamespace(name="stub", kind="tensor", native_format="torch")  # not built: plans must not need a trained model


def _by_name(plan):
    return {v.name: v for v in plan.variants}


def _types(variant):
    return [type(p) for p in variant.passes]


def test_host_default_plan_has_fp32_int8_int4_on_onnxruntime():
    plan = get_target("host-cpu").plan(PRODUCER, PlanOptions())
    v = _by_name(plan)
    assert list(v) == ["fp32", "int8", "int4"]
    assert _types(v["fp32"]) == [ExportOnnxConfig]
    assert _types(v["int8"]) == [ExportOnnxConfig, Int8QdqConfig]
    assert _types(v["int4"]) == [ExportOnnxConfig, Int4WeightOnlyConfig]
    assert all(var.runtimes == ["onnxruntime"] for var in v.values())
    assert any("TVM rows only when asked" in n for n in plan.notes)
    assert plan.latency_provenance == "measured"


@pytest.mark.parametrize("options", [PlanOptions(tvm=True), PlanOptions(tvm_records=True), PlanOptions(tvm_tune_trials=8)])
def test_tvm_joins_fp32_and_int8_when_asked(options):
    v = _by_name(get_target("host-cpu").plan(PRODUCER, options))
    assert v["fp32"].runtimes == v["int8"].runtimes == ["onnxruntime", "tvm"]
    assert v["int4"].runtimes == ["onnxruntime"]  # TVM cannot run MatMulNBits


def test_host_plan_passes_options_into_the_configs():
    opts = PlanOptions(tvm=False, options={"calibration": "percentile", "percentile": 99.9, "int4_block_size": 64})
    v = _by_name(get_target("host-cpu").plan(PRODUCER, opts))
    q = v["int8"].passes[1]
    assert (q.calibration, q.percentile) == ("percentile", 99.9)
    assert v["int4"].passes[1].block_size == 64
    assert all(var.runtimes == ["onnxruntime"] for var in v.values())


def test_int4_gemm_false_keeps_gemms_fp32_and_leaves_int4_out_of_a_model_with_nothing_else():
    off = PlanOptions(tvm=False, options={"int4_gemm": False})
    mixed = SimpleNamespace(name="user", kind="tensor", native_format="onnx", int4_layers={"matmul": 1, "gemm": 2})
    assert _by_name(get_target("host-cpu").plan(mixed, off))["int4"].passes[-1].gemm_as_matmul is False
    assert _by_name(get_target("host-cpu").plan(mixed, PlanOptions(tvm=False)))["int4"].passes[-1].gemm_as_matmul
    gemms = SimpleNamespace(name="mlp", kind="tensor", native_format="onnx", int4_layers={"matmul": 0, "gemm": 2})
    plan = get_target("host-cpu").plan(gemms, off)
    assert "int4" not in _by_name(plan)
    assert "variant int4 not built: its 2 weight layer(s) are Gemm, which int4_gemm=false keeps in fp32" in plan.notes
    with pytest.raises(EdgesmithError, match="mlp has no int4 variant"):
        get_target("host-cpu").plan(gemms, PlanOptions(tvm=False, variants=("int4",), options={"int4_gemm": False}))


def test_exclude_reaches_every_post_training_variant_and_the_plan_says_what_it_keeps():
    names = ["/pooler/dense/Gemm", "/classifier/Gemm"]
    opts = PlanOptions(tvm=False, options={"exclude": names, "prune_sparsity": 0.5})
    plan = get_target("host-cpu").plan(PRODUCER, opts)
    v = _by_name(plan)
    # the pruned variant ends in int8 too; excluding every layer is what was asked, so it is not an error
    for name in ("int8", "int4", "pruned"):
        assert (v[name].passes[-1].exclude, v[name].passes[-1].allow_empty) == (tuple(names), True)
    assert "kept in fp32 by exclude in the post-training variants: /pooler/dense/Gemm, /classifier/Gemm" in plan.notes
    jetson = get_target("jetson-orin-nano").plan(PRODUCER, opts)
    assert _by_name(jetson)["int8"].passes[-1].exclude == tuple(names)
    assert any("kept in fp32 by exclude" in n for n in jetson.notes)
    # without the option nothing is excluded and an empty result stays an error
    plain = _by_name(get_target("host-cpu").plan(PRODUCER, PlanOptions(tvm=False)))
    assert (plain["int4"].passes[-1].exclude, plain["int4"].passes[-1].allow_empty) == ((), False)


def test_int8_op_types_reach_every_int8_config_and_a_wrong_type_fails_at_the_plan():
    opts = PlanOptions(tvm=False, options={"int8_op_types": ["MatMul", "Gemm", "Conv"], "prune_sparsity": 0.5})
    v = _by_name(get_target("host-cpu").plan(PRODUCER, opts))
    assert v["int8"].passes[-1].op_types == v["pruned"].passes[-1].op_types == ("MatMul", "Gemm", "Conv")
    assert _by_name(get_target("jetson-orin-nano").plan(PRODUCER, opts))["int8"].passes[-1].op_types == \
        ("MatMul", "Gemm", "Conv")
    # the default is the weight layers; an empty list asks for onnxruntime's full set
    assert _by_name(get_target("host-cpu").plan(PRODUCER, PlanOptions(tvm=False)))["int8"].passes[-1].op_types == \
        INT8_WEIGHT_OP_TYPES
    with pytest.raises(EdgesmithError, match="op_types"):
        get_target("host-cpu").plan(PRODUCER, PlanOptions(tvm=False, options={"int8_op_types": ["Matmul"]}))


def test_exclude_is_refused_where_no_layer_can_stay_fp32_and_named_for_what_it_does_not_touch():
    from edgesmith.hardware.host_cpu import exclude_notes
    from edgesmith.models.kinds import get_kind

    with pytest.raises(EdgesmithError, match="loihi2 runs every layer in fixed point; it cannot keep /fc/Gemm"):
        get_target("loihi2").plan(PRODUCER, PlanOptions(options={"exclude": ["/fc/Gemm"]}))
    for bad in ([""], [3]):
        with pytest.raises(EdgesmithError, match="exclude"):
            get_kind("tensor").options({"exclude": bad})
    # QAT variants quantize torch Linears, which ONNX node names do not reach: the note says so
    kopts = get_kind("tensor").options({"exclude": ["/fc/Gemm"]})
    notes = exclude_notes(kopts, [SimpleNamespace(name=n) for n in ("fp32", "int8", "qat-w8a8", "qat-w4a8")])
    assert "does not apply to qat-w8a8, qat-w4a8" in notes[1]


def test_host_pruned_variant_appears_only_with_a_sparsity():
    v = _by_name(get_target("host-cpu").plan(PRODUCER, PlanOptions(options={"prune_sparsity": 0.7})))
    assert _types(v["pruned"]) == [MagnitudePruneConfig, ExportOnnxConfig, Int8QdqConfig]
    assert v["pruned"].passes[0].sparsity == 0.7
    assert "pruned" not in _by_name(get_target("host-cpu").plan(PRODUCER, PlanOptions()))


def test_variants_option_filters_by_name_in_target_order():
    plan = get_target("host-cpu").plan(PRODUCER, PlanOptions(variants=("int4", "fp32")))
    assert [v.name for v in plan.variants] == ["fp32", "int4"]


def test_unknown_variant_name_is_a_user_error_listing_the_choices():
    with pytest.raises(EdgesmithError, match="no variant 'int2'") as e:
        get_target("host-cpu").plan(PRODUCER, PlanOptions(variants=("int2",)))
    assert "int8" in e.value.fix


def test_asking_for_pruned_without_sparsity_says_how_to_get_it():
    with pytest.raises(EdgesmithError, match="not available") as e:
        get_target("host-cpu").plan(PRODUCER, PlanOptions(variants=("pruned",)))
    assert "sparsity" in e.value.fix


def test_jetson_plan_is_fp32_fp16_and_int8_on_the_onnxruntime_proxy():
    plan = get_target("jetson-orin-nano").plan(PRODUCER, PlanOptions(options={"prune_sparsity": 0.5}))
    v = _by_name(plan)
    assert list(v) == ["fp32", "fp16", "int8"]
    assert [p.kind for p in v["fp16"].passes][-1] == "fp16"
    assert all(var.runtimes == ["onnxruntime"] for var in v.values())
    assert plan.latency_provenance == "estimated"
    assert any("proxy" in n for n in plan.notes)
    with pytest.raises(EdgesmithError):
        get_target("jetson-orin-nano").plan(PRODUCER, PlanOptions(variants=("int4",)))


def test_loihi2_plan_is_one_sigma_delta_variant_on_lava():
    plan = get_target("loihi2").plan(PRODUCER, PlanOptions())
    assert [v.name for v in plan.variants] == ["sigma-delta"]
    assert _types(plan.variants[0]) == [ExportNetxConfig]
    assert plan.variants[0].runtimes == ["lava"]
    assert plan.latency_provenance == "estimated"


def test_loihi2_plan_refuses_a_built_model_too_big_for_the_chip():
    big = SimpleNamespace(name="big", kind="tensor", native_format="torch", module_=nn.Linear(6000, 5000))  # 30M 8-bit weights > 24 MiB
    with pytest.raises(EdgesmithError, match="budget"):
        get_target("loihi2").plan(big, PlanOptions())


def test_plan_round_trips_to_json_ready_dict():
    d = get_target("host-cpu").plan(PRODUCER, PlanOptions()).to_dict()
    assert d["target"] == "host-cpu"
    assert d["variants"][1]["passes"][1]["kind"] == "int8-qdq"


def test_a_bad_kind_option_is_a_user_error_naming_the_option():
    with pytest.raises(EdgesmithError, match="int4_block_size"):
        get_target("host-cpu").plan(PRODUCER, PlanOptions(options={"int4_block_size": 48}))
    with pytest.raises(EdgesmithError, match="no option"):
        get_target("host-cpu").plan(PRODUCER, PlanOptions(options={"calibrate": "minmax"}))


@pytest.mark.parametrize("target,kind", [("loihi2", "token-lm"), ("loihi2", "tree-policy"),
                                         ("jetson-orin-nano", "tree-policy")])
def test_a_kind_without_a_plan_is_refused_with_the_reason_and_the_targets_that_run_it(target, kind):
    with pytest.raises(EdgesmithError, match=f"a {kind} model") as e:
        get_target(target).plan(SimpleNamespace(name="m", kind=kind, native_format="torch"), PlanOptions())
    assert "host-cpu" in e.value.fix


def test_each_kind_gets_its_own_variants_on_the_host():
    plans = {k: _by_name(get_target("host-cpu").plan(SimpleNamespace(name="m", kind=k, native_format="torch"), PlanOptions(
        options={"methods": ["rwkv-rtn"], "bits": [4]} if k == "token-lm" else {}))) for k in
             ("token-lm", "stream", "tree-policy")}
    assert list(plans["token-lm"]) == ["fp32", "rtn-4bit"]
    assert [p.kind for p in plans["token-lm"]["rtn-4bit"].passes] == ["rwkv-rtn", "export-step-onnx"]
    assert list(plans["stream"]) == ["dense", "dense-step", "sparse", "sparse-fixed"]
    assert plans["stream"]["dense-step"].runtimes == ["onnxruntime"]  # the streaming step, state fed back
    assert plans["stream"]["sparse-fixed"].runtimes == ["lrnn-ref"]
    assert {n: v.runtimes for n, v in plans["tree-policy"].items()} == {"trees": ["trees"], "onnx": ["onnxruntime"],
                                                                         "c": ["c"]}


def test_symmetric_grids_are_a_token_lm_option_named_in_the_variant():
    plan = _by_name(get_target("host-cpu").plan(SimpleNamespace(name="m", kind="token-lm", native_format="torch"),
                                                PlanOptions(options={"methods": ["rwkv-gptq"], "bits": [3],
                                                                     "symmetric": True})))
    assert list(plan) == ["fp32", "gptq-3bit-sym"] and plan["gptq-3bit-sym"].passes[0].symmetric is True


def test_vq_normalisation_is_a_token_lm_option_named_only_on_the_methods_with_vq_matrices():
    plan = _by_name(get_target("host-cpu").plan(SimpleNamespace(name="m", kind="token-lm", native_format="torch"),
                                                PlanOptions(options={"methods": ["rwkv-gptq", "rwkv-gptvq", "rwkvquant"],
                                                                     "bits": [4], "vq_scale_block": 32})))
    assert list(plan) == ["fp32", "gptq-4bit", "gptvq-4bit-vqn32", "rwkvquant-4bit-vqn32"]
    assert all(plan[n].passes[0].vq_scale_block == 32 for n in list(plan)[1:])
    with pytest.raises(EdgesmithError, match="vq_scale_block"):
        get_target("host-cpu").plan(SimpleNamespace(name="m", kind="token-lm", native_format="torch"),
                                    PlanOptions(options={"vq_scale_block": 31}))


def test_rwkvquant_decision_rule_is_a_token_lm_option_named_only_on_rwkvquant():
    from edgesmith.compress.rwkvquant.rwkvquant import PROXIES
    from edgesmith.models.kinds.token_lm import PROXIES as OFFERED

    assert OFFERED == PROXIES  # the kind offers every rule the pass knows, no other
    plan = _by_name(get_target("host-cpu").plan(SimpleNamespace(name="m", kind="token-lm", native_format="torch"),
                                                PlanOptions(options={"methods": ["rwkv-gptq", "rwkvquant"],
                                                                     "bits": [3], "proxy": "oracle"})))
    assert list(plan) == ["fp32", "gptq-3bit", "rwkvquant-3bit-oracle"]
    assert plan["rwkvquant-3bit-oracle"].passes[0].proxy == "oracle"
    with pytest.raises(EdgesmithError, match="proxy"):
        get_target("host-cpu").plan(SimpleNamespace(name="m", kind="token-lm", native_format="torch"),
                                    PlanOptions(options={"proxy": "guess"}))


def test_sequential_calibration_is_a_token_lm_option_named_only_on_the_calibrated_methods():
    plan = _by_name(get_target("host-cpu").plan(SimpleNamespace(name="m", kind="token-lm", native_format="torch"),
                                                PlanOptions(options={"methods": ["rwkv-rtn", "rwkv-gptq", "rwkvquant"],
                                                                     "bits": [3], "sequential": True})))
    assert list(plan) == ["fp32", "rtn-3bit", "gptq-3bit-seq", "rwkvquant-3bit-seq"]
    assert all(plan[n].passes[0].sequential for n in list(plan)[1:])
    with pytest.raises(EdgesmithError, match="sequential"):
        get_target("host-cpu").plan(SimpleNamespace(name="m", kind="token-lm", native_format="torch"),
                                    PlanOptions(options={"sequential": "yes"}))


def test_the_c_decoder_is_a_token_lm_option_for_rwkv_torch_models():
    from edgesmith.models.rwkv.base import RWKVConfig

    seven = SimpleNamespace(name="m", kind="token-lm", native_format="torch",
                            module=SimpleNamespace(cfg=RWKVConfig(version=7)))
    opts = {"methods": ["rwkv-gptq"], "bits": [4]}
    plan = get_target("host-cpu").plan(seven, PlanOptions(options={**opts, "decoders": ["onnxruntime", "rwkv-c"]}))
    by = _by_name(plan)
    assert list(by) == ["fp32", "gptq-4bit", "fp32-c", "gptq-4bit-c"]
    assert [p.kind for p in by["gptq-4bit-c"].passes] == ["rwkv-gptq", "export-rwkv-c"]
    assert by["gptq-4bit-c"].runtimes == ["rwkv-c"]
    only_c = _by_name(get_target("host-cpu").plan(seven, PlanOptions(options={**opts, "decoders": ["rwkv-c"]})))
    assert list(only_c) == ["fp32-c", "gptq-4bit-c"]
    six = SimpleNamespace(name="m6", kind="token-lm", native_format="torch",
                          module=SimpleNamespace(cfg=RWKVConfig(version=6)))
    assert list(_by_name(get_target("host-cpu").plan(six, PlanOptions(options={**opts, "decoders": ["rwkv-c"]})))) \
        == ["fp32-c", "gptq-4bit-c"]
    graph = SimpleNamespace(name="g", kind="token-lm", native_format="onnx")  # a user's step graph: no torch model
    both = get_target("host-cpu").plan(graph, PlanOptions(options={"decoders": ["onnxruntime", "rwkv-c"]}))
    assert all(not v.name.endswith("-c") for v in both.variants) and any("onnx model" in n for n in both.notes)
    with pytest.raises(EdgesmithError, match="onnx model"):
        get_target("host-cpu").plan(graph, PlanOptions(options={"decoders": ["rwkv-c"]}))
    with pytest.raises(EdgesmithError, match="decoders"):
        get_target("host-cpu").plan(seven, PlanOptions(options={"decoders": ["tvm"]}))


def test_an_empty_int8_op_types_asks_for_every_type_onnxruntime_quantizes():
    opts = PlanOptions(tvm=False, options={"int8_op_types": []})
    assert _by_name(get_target("host-cpu").plan(PRODUCER, opts))["int8"].passes[-1].op_types == ()


def test_int8_op_types_auto_asks_the_pass_to_choose_between_the_weight_layers_and_every_type():
    from edgesmith.models.kinds.tensor import INT8_WEIGHT_OP_TYPES

    auto = _by_name(get_target("host-cpu").plan(PRODUCER, PlanOptions(tvm=False, options={"int8_op_types": "auto"})))
    cfg = auto["int8"].passes[-1]
    assert cfg.choose_op_types is True and cfg.op_types == INT8_WEIGHT_OP_TYPES
    plain = _by_name(get_target("host-cpu").plan(PRODUCER, PlanOptions(tvm=False)))["int8"].passes[-1]
    assert plain.choose_op_types is False
    with pytest.raises(EdgesmithError, match="use auto alone"):
        get_target("host-cpu").plan(PRODUCER, PlanOptions(tvm=False, options={"int8_op_types": ["auto", "MatMul"]}))

