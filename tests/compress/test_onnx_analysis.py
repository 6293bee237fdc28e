"""Shared analysis helpers, and the bit accounting of both ONNX passes checked by hand on a tiny model."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgesmith.compress import Artifact, PassContext, apply_pass
from edgesmith.compress.base import LayerReport
from edgesmith.compress.onnx_analysis import (
    bits_per_weight,
    capture_tensors,
    find_weight_layers,
    output_sqnr,
    report_db,
    sqnr_db,
    tensor_bits,
)
from edgesmith.compress.quant_int4 import Int4WeightOnlyConfig
from edgesmith.compress.quant_int8 import Int8QdqConfig

K1, N1, N2, N3 = 40, 24, 6, 4  # K1=40 and K2=24 are not multiples of 16: the last int4 block is padded


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """x[B,40] -MatMul W1[40,24]- Relu -MatMul W2[24,6]- Gemm W3[6,4] ; plus a MatMul whose weight
    is computed at run time (W4 + 0, so it is not a constant initializer)."""
    rng = np.random.default_rng(1)
    w1, w2, w3, w4 = (rng.normal(size=s).astype(np.float32) for s in [(K1, N1), (N1, N2), (N2, N3), (N1, 3)])
    nodes = [
        helper.make_node("MatMul", ["input", "W1"], ["h1"], name="mm1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "W2"], ["h2"], name="mm2"),
        helper.make_node("Gemm", ["h2", "W3"], ["h3"], name="gemm3"),
        helper.make_node("Add", ["W4", "zero"], ["W4_copy"], name="add4"),
        helper.make_node("MatMul", ["r1", "W4_copy"], ["h4"], name="mm4"),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", K1])],
        [helper.make_tensor_value_info("h3", TensorProto.FLOAT, ["batch", N3]),
         helper.make_tensor_value_info("h4", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, n) for w, n in zip((w1, w2, w3, w4, np.zeros((), np.float32)),
                                                       ("W1", "W2", "W3", "W4", "zero"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    onnx.save(model, str(path))
    calib = np.abs(rng.normal(size=(32, K1))).astype(np.float32)
    return Artifact("onnx", path=path, meta={"input_shape": [K1]}), calib


def _run(art, cfg, calib, tmp_path):
    return apply_pass(art, cfg, PassContext(workdir=tmp_path, calibration=calib, progress=False)).report


def test_sqnr_matches_the_formula_and_is_infinite_for_identical_tensors():
    ref = np.array([3.0, 4.0])
    assert sqnr_db(ref, ref + np.array([0.3, 0.4])) == pytest.approx(20.0)  # noise is ref/10 -> 100x power
    assert sqnr_db(ref, ref) == math.inf
    assert report_db(math.inf) is None and report_db(12.34567) == 12.346


def test_find_weight_layers_reports_constant_and_computed_weights(tiny):
    layers = {layer.node_name: layer for layer in find_weight_layers(onnx.load(str(tiny[0].path)))}
    assert list(layers) == ["mm1", "mm2", "gemm3", "mm4"]
    assert layers["mm1"].weight.shape == (K1, N1) and layers["mm1"].output == "h1"
    assert layers["mm4"].weight is None and "not a constant initializer" in layers["mm4"].reason


def test_captured_intermediate_tensors_equal_a_numpy_forward_pass(tiny):
    art, calib = tiny
    model = onnx.load(str(art.path))
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    got = capture_tensors(model, ["h1", "r1", "h2"], calib, batch=10)  # batching must not change results
    h1 = calib @ w["W1"]
    np.testing.assert_allclose(got["h1"], h1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["h2"], np.maximum(h1, 0) @ w["W2"], rtol=1e-5, atol=1e-4)
    assert len(model.graph.output) == 2  # the caller's model is not modified


def test_output_sqnr_of_a_model_against_itself_is_exact(tiny):
    model = onnx.load(str(tiny[0].path))
    assert output_sqnr(model, model, ["h1", "h2", "no_such_tensor"], tiny[1]) == {"h1": math.inf, "h2": math.inf}


def test_tensor_bits_counts_elements_times_width():
    assert tensor_bits(numpy_helper.from_array(np.zeros((3, 5), np.int8))) == 120
    assert tensor_bits(numpy_helper.from_array(np.zeros((7,), np.float32))) == 224


def test_bits_per_weight_is_weighted_by_params_and_ignores_skipped_layers():
    layers = [LayerReport("a", "quantized", 8.5, 100), LayerReport("b", "quantized", 5.0, 300),
              LayerReport("c", "skipped", 32.0, 1000)]
    assert bits_per_weight(layers) == pytest.approx((8.5 * 100 + 5.0 * 300) / 400)
    assert bits_per_weight([LayerReport("c", "skipped", 32.0, 10)]) is None


def test_int8_bits_per_weight_matches_hand_count(tiny, tmp_path):
    report = _run(tiny[0], Int8QdqConfig(), tiny[1], tmp_path)
    by = {layer.name: layer for layer in report.layers}
    # per output channel: K int8 values + one fp32 scale + one int8 zero point
    hand = {"mm1": (K1 * N1 * 8 + N1 * 40, K1 * N1), "mm2": (N1 * N2 * 8 + N2 * 40, N1 * N2),
            "gemm3": (N2 * N3 * 8 + N3 * 40, N2 * N3)}
    for name, (bits, n) in hand.items():
        assert by[name].action == "quantized"
        assert by[name].n_params == n
        assert by[name].bits_per_weight == pytest.approx(bits / n)
    assert by["mm4"].action == "skipped" and "not a constant initializer" in by["mm4"].reason
    assert report.bits_per_weight == pytest.approx(sum(b for b, _ in hand.values()) / sum(n for _, n in hand.values()))


@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_bits_per_weight_matches_hand_count(tiny, tmp_path, symmetric):
    report = _run(tiny[0], Int4WeightOnlyConfig(block_size=16, symmetric=symmetric), tiny[1], tmp_path)
    by = {layer.name: layer for layer in report.layers}

    def hand(k, n):
        blocks = math.ceil(k / 16)
        bits = n * blocks * 16 * 4 + n * blocks * 32  # padded 4-bit codes + fp32 scale per block
        if not symmetric:
            bits += n * math.ceil(blocks / 2) * 8  # 4-bit zero points, packed two per byte per column
        return bits

    dims = {"mm1": (K1, N1), "mm2": (N1, N2), "gemm3": (N2, N3)}  # the Gemm is rewritten as MatMul first
    for name, (k, n) in dims.items():
        assert by[name].action == "quantized"
        assert by[name].bits_per_weight == pytest.approx(hand(k, n) / (k * n))
    assert report.bits_per_weight == pytest.approx(sum(hand(k, n) for k, n in dims.values())
                                                   / sum(k * n for k, n in dims.values()))
    assert by["mm4"].action == "skipped" and "not a constant initializer" in by["mm4"].reason
    assert set(report.skipped) == {"mm4"}
    off = _run(tiny[0], Int4WeightOnlyConfig(block_size=16, symmetric=symmetric, gemm_as_matmul=False), tiny[1],
               tmp_path / "off")
    gemm = next(layer for layer in off.layers if layer.name == "gemm3")
    assert gemm.action == "skipped" and "gemm_as_matmul=true" in gemm.reason


def test_strip_identities_renames_readers_inside_subgraphs_and_can_keep_to_initializers():
    from onnx import TensorProto, helper, numpy_helper

    from edgesmith.compress.onnx_analysis import strip_identities

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    branch = lambda n: helper.make_graph([helper.make_node("MatMul", ["x", "w_alias"], [n])], n, [],  # noqa: E731
                                         [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", 4])])
    nodes = [helper.make_node("Identity", ["w"], ["w_alias"], name="shared"),  # torch's form for a shared weight
             helper.make_node("Identity", ["x"], ["x_copy"], name="plain"),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("t"), else_branch=branch("e")),
             helper.make_node("Add", ["y", "x_copy"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert strip_identities(model, of_initializers=True) == 1  # the weight's Identity only
    assert [n.name for n in model.graph.node if n.op_type == "Identity"] == ["plain"]
    assert [n.input[1] for a in model.graph.node[1].attribute for n in a.g.node] == ["w", "w"]
    onnx.checker.check_model(model, full_check=True)
    assert strip_identities(model) == 1 and "Identity" not in {n.op_type for n in model.graph.node}


def test_sorting_places_an_if_after_the_top_level_tensors_its_branches_read():
    from edgesmith.compress.onnx_analysis import topologically_sorted

    # a quantizer appends the Q/DQ pair an If's branch reads at the end of the top-level graph: onnx's checker
    # refuses that order, and a sort that ignores the branch's outer-scope reads would leave it
    branch = lambda name: helper.make_graph([helper.make_node("Identity", ["t"], [name])], name, [],
                                            [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch("a"), else_branch=branch("b")),
             helper.make_node("Neg", ["x"], ["t"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model, full_check=True)
    assert topologically_sorted(model)
    assert [n.op_type for n in model.graph.node] == ["Neg", "If"]
    onnx.checker.check_model(model, full_check=True)


def test_batch_norms_fold_into_the_conv_before_them_with_the_same_outputs():
    import onnxruntime as ort

    from edgesmith.compress.onnx_analysis import fold_batch_norms

    rng = np.random.default_rng(0)
    arr = lambda *s: rng.standard_normal(s).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in [(arr(4, 3, 3, 3), "W"), (arr(4), "B"), (arr(4), "g"),
                                                          (arr(4), "b"), (arr(4), "m"), (np.abs(arr(4)) + 0.5, "v")]]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], epsilon=1e-3),
             helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = arr(1, 3, 5, 5)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    before = run(model)
    assert fold_batch_norms(model) == 1
    assert [(n.op_type, n.name) for n in model.graph.node] == [("Conv", "conv"), ("Relu", "")]
    np.testing.assert_allclose(run(model), before, rtol=1e-5, atol=1e-5)
    assert {t.name for t in model.graph.initializer} == {"W", "B"}  # the BN's parameters are gone


def test_div_by_a_constant_and_hardsigmoid_are_rewritten_into_quantizable_ops_with_the_same_values():
    import onnxruntime as ort

    from edgesmith.compress.onnx_analysis import as_quantizable_ops

    # HardSwish as mobile networks export it: x * HardSigmoid(x), and a Div by 6 of another branch
    nodes = [helper.make_node("HardSigmoid", ["x"], ["hs"], name="hsig", alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["x", "hs"], ["hswish"]), helper.make_node("Div", ["hswish", "six"], ["y"], name="d")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              initializer=[numpy_helper.from_array(np.array(6.0, np.float32), "six")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-5, 5, 16, dtype=np.float32).reshape(2, 8)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    before = run(model)
    assert as_quantizable_ops(model) == {"Div": 1, "HardSigmoid": 1}
    assert {n.op_type for n in model.graph.node} == {"Mul", "Add", "Clip"}
    assert {"hsig", "d"} <= {n.name for n in model.graph.node}  # exclude lists still find them
    np.testing.assert_allclose(run(model), before, rtol=1e-6, atol=1e-7)
    onnx.checker.check_model(model, full_check=True)
