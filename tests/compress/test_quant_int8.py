"""int8-qdq: config checks, the quantized graph, accuracy on digits, calibration choices, bad data."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgesmith.compress import Artifact, PassContext, apply_pass, config_from_json
from edgesmith.compress.onnx_analysis import find_weight_layers
from edgesmith.compress.quant_int8 import Int8QdqConfig, dequantized_int8_weight
from edgesmith.common import EdgesmithError
from edgesmith.runtimes import get_runtime


def _accuracy(digits, artifact) -> float:
    rt = get_runtime("onnxruntime", threads=1).load(artifact)
    return digits.evaluate(lambda x: rt.run(x).outputs).value


def _quantize(digits, artifact, cfg, workdir, **ctx):
    ctx = {"calibration": digits.calibration_data(), "progress": False, **ctx}
    return apply_pass(artifact, cfg, PassContext(workdir=workdir, **ctx))


@pytest.fixture(scope="module")
def int8_results(digits, digits_onnx, tmp_path_factory):
    return {c: _quantize(digits, digits_onnx, Int8QdqConfig(calibration=c), tmp_path_factory.mktemp(c))
            for c in ("minmax", "percentile")}


@pytest.mark.parametrize("fields, field", [
    ({"calibration": "entropy"}, "calibration"),
    ({"percentile": 120.0}, "percentile"),
    ({"percentile": 10.0}, "percentile"),
    ({"n_calibration": 0}, "n_calibration"),
    ({"n_calibration": True}, "n_calibration"),
    ({"exclude": "/0/MatMul"}, "exclude"),
    ({"activations": "int4"}, "activations"),
    ({"symmetric_activations": True}, "symmetric_activations"),  # with uint8 activations: zero would sit at 128
    ({"symmetric_activations": "yes", "activations": "int8"}, "symmetric_activations"),
    ({"output_quantizers": "no"}, "output_quantizers"),
])
def test_invalid_config_fields_are_rejected_by_name(fields, field):
    with pytest.raises(EdgesmithError, match=f"int8-qdq: {field} "):
        Int8QdqConfig(**fields)


def test_config_round_trips_through_json():
    cfg = Int8QdqConfig(calibration="percentile", percentile=99.9, n_calibration=64, exclude=("/4/MatMul",),
                        activations="int8")
    assert config_from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize("calibration", ["minmax", "percentile"])
def test_int8_accuracy_is_within_two_points_of_fp32(digits, digits_onnx, int8_results, calibration):
    fp32 = _accuracy(digits, digits_onnx)
    assert _accuracy(digits, int8_results[calibration].artifact) >= fp32 - 0.02


def test_int8_graph_holds_qdq_nodes_and_int8_weights_only(digits_onnx, int8_results):
    art = int8_results["minmax"].artifact
    assert art.path.name == "model.int8.onnx"
    assert art.meta["precision"] == "int8" and art.meta["input_shape"] == digits_onnx.meta["input_shape"]
    q = onnx.load(str(art.path))
    ops = {n.op_type for n in q.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    inits = {t.name: t for t in q.graph.initializer}
    producers = {o: n for n in q.graph.node for o in n.output}
    for layer in find_weight_layers(onnx.load(str(digits_onnx.path))):
        assert layer.weight_name not in inits  # no fp32 copy of the weight left behind
        node = next(n for n in q.graph.node if n.name == layer.node_name)
        dq = producers[node.input[1]]
        assert dq.op_type == "DequantizeLinear"
        stored = inits[dq.input[0]]
        assert stored.data_type == onnx.TensorProto.INT8 and tuple(stored.dims) == layer.weight.shape


def test_weights_are_per_channel_and_dequantize_within_half_a_step(digits_onnx, int8_results):
    q = onnx.load(str(int8_results["minmax"].artifact.path))
    scales = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer if t.name.endswith("weight_t_scale")}
    for layer in find_weight_layers(onnx.load(str(digits_onnx.path))):
        w, _ = dequantized_int8_weight(q, layer)
        scale = scales[f"{layer.weight_name}_scale"]
        assert scale.shape == (layer.weight.shape[1],)  # one scale per output channel (axis 1 of [K, N])
        assert np.all(np.abs(w - layer.weight) <= scale / 2 + 1e-7)


def test_report_has_sizes_bits_and_per_layer_errors(int8_results):
    report = int8_results["minmax"].report
    assert 0 < report.size_after_bytes < report.size_before_bytes / 2
    assert 8.0 < report.bits_per_weight < 9.0
    assert [layer.name for layer in report.layers] == ["/0/MatMul", "/2/MatMul", "/4/MatMul"]
    for layer in report.layers:
        assert layer.action == "quantized"
        # 8-bit per-channel weights land near 6 dB/bit; below 35 dB means scales or axes are wrong
        assert layer.error["weight_sqnr_db"] > 35
        assert layer.error["output_sqnr_db"] > 25


def test_percentile_and_minmax_calibration_give_different_activation_scales(int8_results):
    def activation_scales(res):
        q = onnx.load(str(res.artifact.path))
        return {t.name: float(numpy_helper.to_array(t)) for t in q.graph.initializer
                if t.name.endswith("_scale") and not t.dims and "bias" not in t.name}

    mm, pc = activation_scales(int8_results["minmax"]), activation_scales(int8_results["percentile"])
    assert mm.keys() == pc.keys() and mm
    assert any(not np.isclose(mm[k], pc[k], rtol=1e-6) for k in mm)
    assert all(pc[k] <= mm[k] * (1 + 1e-6) for k in mm)  # clipping outliers can only narrow a range


def test_exclude_keeps_a_layer_in_fp32(digits, digits_onnx, tmp_path):
    res = _quantize(digits, digits_onnx, Int8QdqConfig(exclude=("/2/MatMul",)), tmp_path)
    by = {layer.name: layer for layer in res.report.layers}
    assert by["/2/MatMul"].action == "skipped" and "excluded" in by["/2/MatMul"].reason
    assert by["/2/MatMul"].bits_per_weight == 32.0
    q = onnx.load(str(res.artifact.path))
    node = next(n for n in q.graph.node if n.name == "/2/MatMul")
    w = next(t for t in q.graph.initializer if t.name == node.input[1])
    assert w.data_type == onnx.TensorProto.FLOAT


def test_unknown_exclude_name_is_rejected_with_the_valid_names(digits, digits_onnx, tmp_path):
    with pytest.raises(EdgesmithError, match="/0/MatMul"):
        _quantize(digits, digits_onnx, Int8QdqConfig(exclude=("nope",)), tmp_path)


def test_same_inputs_give_byte_identical_models(digits, digits_onnx, tmp_path):
    a = _quantize(digits, digits_onnx, Int8QdqConfig(calibration="percentile"), tmp_path / "a").artifact
    b = _quantize(digits, digits_onnx, Int8QdqConfig(calibration="percentile"), tmp_path / "b").artifact
    assert a.path.read_bytes() == b.path.read_bytes()


@pytest.mark.parametrize("calibration, message", [
    (np.full((8, 64), np.nan, np.float32), "NaN"),
    (np.zeros((0, 64), np.float32), "empty"),
    (None, "needs calibration data"),
])
def test_bad_calibration_data_is_a_user_error(digits, digits_onnx, tmp_path, calibration, message):
    with pytest.raises(EdgesmithError, match=message):
        _quantize(digits, digits_onnx, Int8QdqConfig(), tmp_path, calibration=calibration)
    assert not (tmp_path / "model.int8.onnx").exists()


def test_n_calibration_limits_the_samples_used(digits, digits_onnx, tmp_path):
    res = _quantize(digits, digits_onnx, Int8QdqConfig(n_calibration=16), tmp_path)
    assert any("on 16 samples" in note for note in res.report.notes)


def test_failed_shape_inference_leaves_nothing_in_the_working_directory(digits, digits_onnx, tmp_path, monkeypatch):
    import onnxruntime.quantization.shape_inference as si

    def gives_up(src, dst, **kw):
        # what onnxruntime does when symbolic shape inference is incomplete: dump files into the cwd
        Path("sym_shape_infer_temp.onnx").write_bytes(b"x")
        Path("0b7e-uuid.data").write_bytes(b"x")
        raise Exception("Incomplete symbolic shape inference")

    monkeypatch.setattr(si, "quant_pre_process", gives_up)
    cwd = tmp_path / "user-cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    res = _quantize(digits, digits_onnx, Int8QdqConfig(), tmp_path / "w")
    assert list(cwd.iterdir()) == []
    assert any("quant_pre_process failed" in n for n in res.report.notes)


def test_identity_fed_conv_weights_are_stripped_so_every_layer_runs_as_an_integer_kernel(tmp_path):
    # exporters put Identity nodes in front of Conv weights and biases; left in, onnxruntime fused only
    # some QDQ pairs and the int8 model ran slower than fp32 (a ResNet-18: 16.9 vs 9.15 ms)
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(8, 3, 3, 3)).astype(np.float32), rng.normal(size=(8,)).astype(np.float32)
    nodes = [helper.make_node("Identity", ["w"], ["w_id"]), helper.make_node("Identity", ["b"], ["b_id"]),
             helper.make_node("Conv", ["x", "w_id", "b_id"], ["y"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["b", 8, 8, 8])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    calib = rng.normal(size=(16, 3, 8, 8)).astype(np.float32)
    res = apply_pass(Artifact("onnx", path=path), Int8QdqConfig(), PassContext(workdir=tmp_path / "w", calibration=calib))
    k = res.report.extra["kernels"]
    assert k["integer_kernels"] == {"QLinearConv": 1} and k["float"] == 0
    assert any("2 Identity node(s) removed" in n for n in res.report.notes)


def test_quantizing_an_already_quantized_model_is_a_user_error(digits, digits_onnx, tmp_path):
    first = _quantize(digits, digits_onnx, Int8QdqConfig(), tmp_path / "a").artifact
    with pytest.raises(EdgesmithError, match="already quantized"):
        _quantize(digits, first, Int8QdqConfig(), tmp_path / "b")


def test_a_model_with_nothing_to_quantize_fails_unless_allowed(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    ctx = PassContext(workdir=tmp_path / "w", calibration=np.ones((8, 4), np.float32))
    with pytest.raises(EdgesmithError, match="quantized 0 of 0"):
        apply_pass(Artifact("onnx", path=path), Int8QdqConfig(), ctx)
    assert apply_pass(Artifact("onnx", path=path), Int8QdqConfig(allow_empty=True), ctx).artifact.path.exists()


def test_reduce_range_is_automatic_on_x86_without_vnni_and_can_be_forced(tmp_path, monkeypatch):
    # onnxruntime's u8s8 kernels saturate on AVX2-only CPUs; 7-bit weights are its documented fix there
    import platform

    from edgesmith.compress import quant_int8

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    avx2, vnni, arm = tmp_path / "avx2", tmp_path / "vnni", tmp_path / "arm"  # one file each: answers are cached per file
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    assert quant_int8.x86_without_vnni(str(avx2))
    vnni.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    assert not quant_int8.x86_without_vnni(str(vnni))
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    arm.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    assert not quant_int8.x86_without_vnni(str(arm))
    assert quant_int8.reduce_range(Int8QdqConfig(reduce_range=True)) is True
    assert quant_int8.reduce_range(Int8QdqConfig(reduce_range=False)) is False
    assert config_from_json(Int8QdqConfig(reduce_range=True).to_json()).reduce_range is True
    with pytest.raises(EdgesmithError, match="reduce_range"):
        Int8QdqConfig(reduce_range="yes")


def _bucket_and_mask_model():
    """What decoder and T5 graphs do besides their Linears: int positions -> float -> Log -> Mul -> int64 bucket ids
    that index a bias table (T5), and scores plus a constant mask of -3.4e38 before a Softmax (causal masks)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    c = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    mask = np.zeros((8, 8), np.float32)
    mask[np.triu_indices(8, 1)] = np.finfo(np.float32).min
    inits = [c(rng.normal(size=(16, 8)).astype(np.float32), "w1"), c(rng.normal(size=(8, 16)).astype(np.float32), "w2"),
             c(rng.normal(size=(40, 8)).astype(np.float32), "table"), c(np.arange(1, 9, dtype=np.int64), "pos"),
             c(np.float32(5.0), "scale"), c(mask, "mask")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT, name="to_float"),
             helper.make_node("Log", ["posf"], ["logp"], name="log"),
             helper.make_node("Mul", ["logp", "scale"], ["scaled"], name="bucket_mul"),
             helper.make_node("Cast", ["scaled"], ["bucket"], to=TensorProto.INT64, name="to_int"),
             helper.make_node("Gather", ["table", "bucket"], ["bias"], name="bias_gather"),
             helper.make_node("Add", ["h", "bias"], ["hb"], name="add_bias"),
             helper.make_node("Add", ["hb", "mask"], ["masked"], name="add_mask"),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_index_arithmetic_is_found_by_its_cast_to_an_integer_and_activations_are_not():
    from onnx import TensorProto, helper

    from edgesmith.compress.quant_int8 import index_arithmetic_nodes

    model = _bucket_and_mask_model()
    assert index_arithmetic_nodes(model) == ["bucket_mul", "log", "to_float"]
    # the same Cast fed by an activation (a MatMul's output) is the network's own arithmetic: left to the quantizer
    model.graph.node.append(helper.make_node("Cast", ["y"], ["yi"], to=TensorProto.INT64, name="y_to_int"))
    model.graph.output.append(helper.make_tensor_value_info("yi", TensorProto.INT64, ["b", 8, 16]))
    assert index_arithmetic_nodes(model) == ["bucket_mul", "log", "to_float"]


@pytest.mark.parametrize("op_types", [(), None], ids=["every-type", "default-weight-layers"])
def test_index_arithmetic_and_masks_stay_fp32_so_int8_computes_what_fp32_does(tmp_path, op_types):
    # quantized, the bucket ids shift (T5's Gather then reads index -9.2e18) and a -3.4e38 mask erases the scores;
    # onnxruntime's full set would quantize them, so they are kept and noted; the default weight-layer set never
    # touches them, so no note claims it kept them
    import onnxruntime as ort

    path = tmp_path / "m.onnx"
    onnx.save(_bucket_and_mask_model(), str(path))
    x = np.random.default_rng(1).normal(size=(32, 8, 16)).astype(np.float32)
    config = Int8QdqConfig() if op_types is None else Int8QdqConfig(op_types=op_types)
    res = apply_pass(Artifact("onnx", path=path), config,
                     PassContext(workdir=tmp_path / "w", calibration=x, progress=False))
    notes = " ".join(res.report.notes)
    noted = op_types is not None
    assert ("3 node(s) of float arithmetic that computes integer indices kept in fp32" in notes) == noted
    assert ("node(s) reading or writing a mask-like tensor" in notes) == noted
    assert ("every operator type onnxruntime's quantizer knows" in notes) == noted
    graph = onnx.load(str(res.artifact.path)).graph
    assert {"log", "bucket_mul", "add_mask", "softmax"} <= {n.name for n in graph.node}
    quantized = {n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    assert quantized.isdisjoint({"logp", "scaled", "masked", "mask"})  # fp32 all the way into the Cast and Softmax
    run = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]  # noqa: E731
    want, got = run(path), run(res.artifact.path)
    assert 10 * np.log10((want ** 2).sum() / ((want - got) ** 2).sum()) > 25
    assert [layer.action for layer in res.report.layers] == ["quantized", "quantized"]


def test_op_types_limits_int8_to_the_named_operators_and_unknown_types_are_refused(tmp_path):
    # a vision transformer's residual Adds and token Concat under one per-tensor scale cost DeiT 22 dB; weight layers
    # only is the usual fix, and the config names the types onnxruntime knows when one is misspelt
    path = tmp_path / "m.onnx"
    onnx.save(_bucket_and_mask_model(), str(path))
    x = np.random.default_rng(1).normal(size=(32, 8, 16)).astype(np.float32)
    ctx = PassContext(workdir=tmp_path / "w", calibration=x, progress=False)
    res = apply_pass(Artifact("onnx", path=path), Int8QdqConfig(op_types=("MatMul",)), ctx)
    graph = onnx.load(str(res.artifact.path)).graph
    matmul_io = {t for n in _bucket_and_mask_model().graph.node if n.op_type == "MatMul" for t in (*n.input, *n.output)}
    # (onnxruntime renames a graph output it quantizes to NAME_QuantizeLinear_Input)
    quantized = {n.input[0].removesuffix("_QuantizeLinear_Input") for n in graph.node if n.op_type == "QuantizeLinear"}
    assert quantized and quantized <= matmul_io  # nothing but what the two MatMuls read and write
    default = apply_pass(Artifact("onnx", path=path), Int8QdqConfig(), PassContext(
        workdir=tmp_path / "d", calibration=x, progress=False)).artifact.path
    assert {n.input[0].removesuffix("_QuantizeLinear_Input") for n in onnx.load(str(default)).graph.node
            if n.op_type == "QuantizeLinear"} - matmul_io  # the default set quantizes more (the bias Add)
    assert res.report.notes[0].startswith("operator types MatMul only;")
    assert [layer.action for layer in res.report.layers] == ["quantized", "quantized"]
    with pytest.raises(EdgesmithError, match="op_types") as e:
        Int8QdqConfig(op_types=("Matmul",))
    assert "MatMul" in e.value.fix and "Softmax" in e.value.fix


def test_choose_op_types_keeps_the_operator_set_whose_outputs_are_closer_to_fp32(tmp_path):
    # small convnets keep 1-4 dB more with onnxruntime's full set, transformers far more with the weight layers:
    # asked to choose, the pass quantizes both ways and keeps, byte for byte, the model of the better set
    path = tmp_path / "m.onnx"
    onnx.save(_bucket_and_mask_model(), str(path))
    x = np.random.default_rng(1).normal(size=(32, 8, 16)).astype(np.float32)

    def run(cfg, name):
        return apply_pass(Artifact("onnx", path=path), cfg, PassContext(workdir=tmp_path / name, calibration=x,
                                                                         progress=False))

    res = run(Int8QdqConfig(choose_op_types=True), "auto")
    choice = res.report.extra["op_types_choice"]
    sets = [c["op_types"] for c in choice["candidates"]]
    assert sets == [list(Int8QdqConfig().op_types), []]
    best = max(choice["candidates"], key=lambda c: c["output_sqnr_db"])
    assert choice["chosen"] == best["op_types"]
    alone = run(Int8QdqConfig(op_types=tuple(best["op_types"])), "alone")
    assert Path(res.artifact.path).read_bytes() == Path(alone.artifact.path).read_bytes()
    assert any(n.startswith("operator types chosen by output SQNR") for n in res.report.notes)
    assert "op_types_choice" not in alone.report.extra  # one set asked for: nothing to choose, no second pass
    assert config_from_json(Int8QdqConfig(choose_op_types=True).to_json()).choose_op_types is True
    with pytest.raises(EdgesmithError, match="choose_op_types"):
        Int8QdqConfig(choose_op_types="yes")


def test_without_output_quantizers_every_activation_quantizer_feeds_a_quantized_layer(digits, digits_onnx, int8_results,
                                                                                   tmp_path):
    # the form OpenVINO fuses: a quantizer on a layer's output that only float nodes read is a round trip there
    res = _quantize(digits, digits_onnx, Int8QdqConfig(output_quantizers=False), tmp_path)
    full, inputs_only = (onnx.load(str(a.path)) for a in (int8_results["minmax"].artifact, res.artifact))

    def activation_quantizers(model):
        made = {o for n in model.graph.node for o in n.output}
        return [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in made]

    assert len(activation_quantizers(inputs_only)) < len(activation_quantizers(full))
    readers = {}
    for n in inputs_only.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    for q in activation_quantizers(inputs_only):
        after = {r.op_type for dq in readers[q.output[0]] for r in readers.get(dq.output[0], [])}
        assert after & {"MatMul", "Gemm", "Conv"}, f"{q.name} feeds only {after}"
    assert any("output quantize/dequantize pair(s)" in n for n in res.report.notes)
    assert _accuracy(digits, res.artifact) >= _accuracy(digits, digits_onnx) - 0.02


def test_a_file_below_opset_13_is_refused_naming_the_upgrade(digits, digits_onnx, tmp_path):
    # onnxruntime's quantizer quantizes no layer of such a file, and "0 of N layers" would not say why
    model = onnx.load(str(digits_onnx.path))
    model.opset_import[0].version = 11
    path = tmp_path / "old.onnx"
    onnx.save(model, str(path))
    with pytest.raises(EdgesmithError, match="opset 11; int8-qdq needs opset 13"):
        _quantize(digits, Artifact("onnx", path=path, meta=dict(digits_onnx.meta)), Int8QdqConfig(), tmp_path / "w")
