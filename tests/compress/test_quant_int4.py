"""int4-weight-only: config checks, MatMulNBits graph, accuracy on digits, the weight unpacking."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgesmith.compress import PassContext, apply_pass, config_from_json
from edgesmith.compress.onnx_analysis import find_weight_layers, initializers
from edgesmith.compress.quant_int4 import Int4WeightOnlyConfig, dequantize_matmulnbits
from edgesmith.common import EdgesmithError
from edgesmith.runtimes import get_runtime


def _accuracy(digits, artifact) -> float:
    rt = get_runtime("onnxruntime", threads=1).load(artifact)
    return digits.evaluate(lambda x: rt.run(x).outputs).value


def _quantize(digits, artifact, cfg, workdir, **ctx):
    ctx = {"calibration": digits.calibration_data(), "progress": False, **ctx}
    return apply_pass(artifact, cfg, PassContext(workdir=workdir, **ctx))


@pytest.fixture(scope="module")
def int4_result(digits, digits_onnx, tmp_path_factory):
    return _quantize(digits, digits_onnx, Int4WeightOnlyConfig(), tmp_path_factory.mktemp("int4"))


@pytest.mark.parametrize("fields, field", [
    ({"block_size": 24}, "block_size"),
    ({"block_size": 8}, "block_size"),
    ({"block_size": True}, "block_size"),
    ({"symmetric": "yes"}, "symmetric"),
    ({"accuracy_level": 5}, "accuracy_level"),
    ({"exclude": "/0/MatMul"}, "exclude"),
    ({"n_calibration": 0}, "n_calibration"),
    ({"gemm_as_matmul": "yes"}, "gemm_as_matmul"),
])
def test_invalid_config_fields_are_rejected_by_name(fields, field):
    with pytest.raises(EdgesmithError, match=f"int4-weight-only: {field} "):
        Int4WeightOnlyConfig(**fields)


def test_config_round_trips_through_json():
    cfg = Int4WeightOnlyConfig(block_size=64, symmetric=False, accuracy_level=1, exclude=("/4/MatMul",))
    assert config_from_json(cfg.to_json()) == cfg


def test_int4_accuracy_is_within_two_points_of_fp32(digits, digits_onnx, int4_result):
    assert _accuracy(digits, int4_result.artifact) >= _accuracy(digits, digits_onnx) - 0.02


def test_int4_graph_replaces_every_matmul_with_matmulnbits(int4_result):
    art = int4_result.artifact
    assert art.path.name == "model.int4.onnx" and art.meta["precision"] == "int4"
    ops = [n.op_type for n in onnx.load(str(art.path)).graph.node]
    assert ops.count("MatMulNBits") == 3 and "MatMul" not in ops


def test_report_counts_five_bits_per_weight_for_symmetric_blocks_of_32(int4_result):
    report = int4_result.report
    assert report.bits_per_weight == pytest.approx(4 + 32 / 32)  # 4-bit code + fp32 scale per 32 weights
    assert report.size_after_bytes < report.size_before_bytes / 4
    for layer in report.layers:
        assert layer.action == "quantized"
        assert 15 < layer.error["weight_sqnr_db"] < 35  # 4 bits: far below int8, far above noise
        assert layer.error["output_sqnr_db"] > 15


@pytest.mark.parametrize("symmetric", [True, False])
def test_unpacked_weights_equal_what_onnxruntime_computes(digits, digits_onnx, tmp_path, symmetric):
    """Feeding the identity matrix through a lone MatMulNBits node returns the weight it really uses."""
    res = _quantize(digits, digits_onnx, Int4WeightOnlyConfig(symmetric=symmetric), tmp_path)
    q = onnx.load(str(res.artifact.path))
    inits = initializers(q)
    for node in (n for n in q.graph.node if n.op_type == "MatMulNBits"):
        ours, _ = dequantize_matmulnbits(node, inits)
        k, n = ours.shape
        lone = helper.make_node("MatMulNBits", ["x", *node.input[1:]], ["y"], domain="com.microsoft",
                                **{a.name: a.i for a in node.attribute if a.name != "accuracy_level"})
        graph = helper.make_graph([lone], "lone", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [k, k])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [k, n])],
                                  [inits[name] for name in node.input[1:] if name])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        theirs = sess.run(None, {"x": np.eye(k, dtype=np.float32)})[0]
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_exclude_keeps_a_matmul_in_fp32(digits, digits_onnx, tmp_path):
    res = _quantize(digits, digits_onnx, Int4WeightOnlyConfig(exclude=("/2/MatMul",)), tmp_path)
    assert res.report.skipped == ["/2/MatMul"]
    q = onnx.load(str(res.artifact.path))
    assert [n.name for n in q.graph.node if n.op_type == "MatMul"] == ["/2/MatMul"]


def test_works_without_calibration_data_but_says_output_error_was_not_measured(digits, digits_onnx, tmp_path):
    res = _quantize(digits, digits_onnx, Int4WeightOnlyConfig(), tmp_path, calibration=None)
    assert all("output_sqnr_db" not in layer.error and "weight_sqnr_db" in layer.error for layer in res.report.layers)
    assert any("output SQNR not measured" in note for note in res.report.notes)


def test_nan_calibration_data_is_a_user_error(digits, digits_onnx, tmp_path):
    with pytest.raises(EdgesmithError, match="NaN"):
        _quantize(digits, digits_onnx, Int4WeightOnlyConfig(), tmp_path, calibration=np.full((4, 64), np.nan))


def test_input_model_file_is_left_unchanged(digits, digits_onnx, tmp_path):
    before = digits_onnx.path.read_bytes()
    _quantize(digits, digits_onnx, Int4WeightOnlyConfig(), tmp_path)
    assert digits_onnx.path.read_bytes() == before
    assert len(find_weight_layers(onnx.load(str(digits_onnx.path)))) == 3


def _gemm_model():
    """Gemms as exporters write them: transB with a bias, alpha/beta not 1, one whose weight another node reads too,
    one with a transposed A (left as it is); weights listed as graph inputs too, as old exporters did."""
    rng = np.random.default_rng(0)
    w1, b1 = rng.normal(size=(24, 16)).astype(np.float32), rng.normal(size=(24,)).astype(np.float32)
    w2, b2 = rng.normal(size=(24, 8)).astype(np.float32), rng.normal(size=(8,)).astype(np.float32)
    w3 = rng.normal(size=(8, 8)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y0"], name="fc2", alpha=0.5, beta=2.0),
             helper.make_node("Gemm", ["y0", "w3"], ["y1"], name="fc3"),
             helper.make_node("Gemm", ["y1", "w3"], ["y"], name="fc4", transA=1),  # A transposed: not rewritten
             helper.make_node("Mul", ["y", "w3"], ["z"])]  # w3 is read elsewhere: it must stay
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])]
                              + [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_gemms_with_a_constant_weight_become_the_matmul_and_add_they_compute():
    from edgesmith.compress.quant_int4 import gemms_as_matmul, int4_layer_counts

    model = _gemm_model()
    rewritten, names = gemms_as_matmul(model)
    assert names == ["fc1", "fc2", "fc3"] and int4_layer_counts(model) == {"matmul": 0, "gemm": 3}
    onnx.checker.check_model(rewritten)
    ops = {n.name: n.op_type for n in rewritten.graph.node}
    assert ops["fc1"] == ops["fc2"] == ops["fc3"] == "MatMul" and ops["fc4"] == "Gemm"
    assert {"w1", "w2", "b2"}.isdisjoint(initializers(rewritten)) and "w3" in initializers(rewritten)
    x = np.random.default_rng(1).normal(size=(8, 16)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(run(rewritten) - run(model)).max() < 1e-4
    assert gemms_as_matmul(rewritten)[1] == []  # nothing left to rewrite: the same graph again


def test_a_model_of_gemm_layers_is_quantized_and_without_the_rewrite_is_refused(tmp_path):
    from edgesmith.compress import Artifact

    onnx.save(_gemm_model(), str(tmp_path / "g.onnx"))
    art = Artifact("onnx", path=tmp_path / "g.onnx")
    res = apply_pass(art, Int4WeightOnlyConfig(block_size=16), PassContext(workdir=tmp_path, progress=False))
    actions = {layer.name: layer.action for layer in res.report.layers}
    assert actions == {"fc1": "quantized", "fc2": "quantized", "fc3": "quantized", "fc4": "skipped"}
    assert any("3 Gemm node(s)" in n for n in res.report.notes)
    assert res.report.size_after_bytes < res.report.size_before_bytes
    with pytest.raises(EdgesmithError, match="quantized 0 of 4 weight layers"):
        apply_pass(art, Int4WeightOnlyConfig(block_size=16, gemm_as_matmul=False),
                   PassContext(workdir=tmp_path / "off", progress=False))


def _if_model():
    """A main-graph MatMul, then an If whose branches each hold a MatMul: one reads a weight of the main graph, the
    other its own branch's, as torch.onnx writes a Linear under data-dependent control flow; and a Gemm in a branch."""
    rng = np.random.default_rng(0)
    w0, w_outer, w_own, w_gemm = (onnx.numpy_helper.from_array(rng.normal(size=(32 if n == "w0" else 64, 64))
                                                               .astype(np.float32), n)
                                  for n in ("w0", "w_outer", "w_own", "w_gemm"))
    then = helper.make_graph([helper.make_node("MatMul", ["h", w_outer.name], ["t"], name="then_fc")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["b", 64])])
    other = helper.make_graph([helper.make_node("MatMul", ["h", w_own.name], ["e0"], name="else_fc"),
                               helper.make_node("Gemm", ["e0", w_gemm.name], ["e"], name="else_gemm")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["b", 64])], [w_own, w_gemm])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", w0.name], ["h"], name="fc0"),
                               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 32]),
                                    helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 64])], [w0, w_outer])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_matmuls_inside_if_branches_are_quantized_counted_and_reported_where_they_sit(tmp_path):
    from edgesmith.compress import Artifact
    from edgesmith.compress.quant_int4 import int4_layer_counts

    model = _if_model()
    onnx.checker.check_model(model)
    assert int4_layer_counts(model) == {"matmul": 3, "gemm": 0}  # the branch Gemm is not rewritten
    onnx.save(model, str(tmp_path / "if.onnx"))
    x = np.random.default_rng(1).normal(size=(64, 32)).astype(np.float32)
    res = apply_pass(Artifact("onnx", path=tmp_path / "if.onnx"), Int4WeightOnlyConfig(),
                     PassContext(workdir=tmp_path / "w", progress=False))
    layers = {layer.name: layer for layer in res.report.layers}
    assert [layers[n].action for n in ("fc0", "then_fc", "else_fc", "else_gemm")] == ["quantized"] * 3 + ["skipped"]
    assert (layers["fc0"].graph, layers["then_fc"].graph) == ("", "If 'branch' then_branch")
    assert "sits in a subgraph" in layers["else_gemm"].reason
    assert all(layers[n].error["weight_sqnr_db"] > 15 for n in ("fc0", "then_fc", "else_fc"))
    # both branches still compute what fp32 does, to 4-bit accuracy
    q = ort.InferenceSession(str(res.artifact.path), providers=["CPUExecutionProvider"])
    f = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for c in (True, False):
        feed = {"x": x, "c": np.array(c)}
        want, got = f.run(None, feed)[0], q.run(None, feed)[0]
        assert 10 * np.log10((want ** 2).sum() / ((want - got) ** 2).sum()) > 15
    # one layer alone (the sensitivity table's unit) leaves the other branch's MatMul in fp32
    from edgesmith.compress.quant_int4 import quantize_int4

    only = quantize_int4(model, Int4WeightOnlyConfig(), only=["then_fc"])
    ops = [n.op_type for a in only.graph.node[1].attribute for n in a.g.node]
    assert sorted(ops) == ["Gemm", "MatMul", "MatMulNBits"]
