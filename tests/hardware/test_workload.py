"""Workload extraction on tiny graphs and modules whose counts can be worked out by hand."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from edgesmith.hardware.workload import workload_from_activity, workload_from_module, workload_from_onnx
from edgesmith.common import EdgesmithError


def _save(tmp_path, nodes, inputs, outputs, inits, name="m.onnx", opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def _mlp_graph(tmp_path, batch_dim="batch"):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W1"),
             numpy_helper.from_array(np.zeros(3, np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((3, 2)).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "W2"], ["y"])]
    return _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 2])], inits)


def test_onnx_mlp_counts_match_hand_computation(tmp_path):
    w = workload_from_onnx(_mlp_graph(tmp_path), batch=8)
    assert w.macs == 4 * 3 + 3 * 2
    assert w.weight_bytes == (12 + 3 + 6) * 4
    # input 4 + h 3 + hb 3 + r 3 + y 2 floats per sample
    assert w.activation_bytes == (4 + 3 + 3 + 3 + 2) * 4
    assert (w.n_layers, w.precision, w.batch) == (2, "fp32", 8)


def test_onnx_fixed_batch_axis_gives_per_sample_counts(tmp_path):
    w = workload_from_onnx(_mlp_graph(tmp_path, batch_dim=5))
    assert w.macs == 18 and w.activation_bytes == 15 * 4


def test_onnx_gemm_with_transposed_weight(tmp_path):
    inits = [numpy_helper.from_array(np.ones((2, 5), np.float32), "B")]
    path = _save(tmp_path, [helper.make_node("Gemm", ["a", "B"], ["y"], transB=1)],
                 [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 5])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], inits)
    assert workload_from_onnx(path).macs == 2 * 5


def test_onnx_conv_macs_are_outputs_times_kernel_volume(tmp_path):
    inits = [numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "W")]
    path = _save(tmp_path, [helper.make_node("Conv", ["x", "W"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    w = workload_from_onnx(path)
    assert w.macs == (3 * 3 * 3) * (2 * 3 * 3)
    assert w.weight_bytes == 3 * 2 * 3 * 3 * 4


def test_onnx_qdq_graph_is_int8_and_folded_weight_dequant_is_not_an_activation(tmp_path):
    inits = [numpy_helper.from_array(np.ones((4, 3), np.int8), "Wq"),
             numpy_helper.from_array(np.array(0.1, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["Wd"]),
             helper.make_node("MatMul", ["xd", "Wd"], ["y"])]
    path = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], inits)
    w = workload_from_onnx(path)
    assert (w.precision, w.macs, w.n_layers) == ("int8", 12, 1)
    assert w.weight_bytes == 12 + 4 + 1 + 4 + 1
    # x fp32 (16) + xq uint8 (4) + y fp32 (12): Wd is folded at load time, and xd is xq read by the fused MatMul
    assert w.activation_bytes == 16 + 4 + 12


def test_an_int8_tensor_between_two_layers_moves_once_at_one_byte(tmp_path):
    # h is written only for QuantizeLinear and hd is read by the next MatMul: a runtime that fuses QDQ (onnxruntime,
    # TensorRT) writes and reads hq, so int8 does not move more bytes than fp32 (it did: h, hq and hd all counted)
    inits = [numpy_helper.from_array(np.ones((4, 4), np.float32), "W1"),
             numpy_helper.from_array(np.ones((4, 3), np.float32), "W2"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "z")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "s", "z"], ["hq"]),
             helper.make_node("DequantizeLinear", ["hq", "s", "z"], ["hd"]),
             helper.make_node("MatMul", ["hd", "W2"], ["y"])]
    path = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], inits)
    # x fp32 (16) + hq uint8 (4) + y fp32 (12); the fp32 graph would move x, h (16) and y
    assert workload_from_onnx(path).activation_bytes == 16 + 4 + 12


def test_onnx_matmulnbits_counts_packed_weights_and_is_int4(tmp_path):
    k, n, block = 32, 4, 32
    inits = [numpy_helper.from_array(np.zeros((n, k // block, block // 2), np.uint8), "Bq"),
             numpy_helper.from_array(np.ones(n * (k // block), np.float32), "scales")]
    node = helper.make_node("MatMulNBits", ["x", "Bq", "scales"], ["y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block)
    path = _save(tmp_path, [node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])], inits,
                 opsets=(("", 17), ("com.microsoft", 1)))
    w = workload_from_onnx(path)
    assert (w.precision, w.macs, w.n_layers) == ("int4", k * n, 1)
    assert w.weight_bytes == n * 16 + n * 4  # 4-bit packed: 16 bytes per 32-weight block, plus fp32 scales
    assert w.activation_bytes == (k + n) * 4


def test_onnx_precision_argument_overrides_the_graph(tmp_path):
    assert workload_from_onnx(_mlp_graph(tmp_path), precision="fp16").precision == "fp16"


def test_onnx_missing_or_corrupt_file_is_a_user_error(tmp_path):
    with pytest.raises(EdgesmithError, match="does not exist"):
        workload_from_onnx(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not onnx at all\xff" * 3)
    with pytest.raises(EdgesmithError):
        workload_from_onnx(bad)


def test_module_mlp_counts_match_hand_computation():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    w = workload_from_module(m, (4,))
    assert w.macs == 18 and w.n_layers == 2
    assert w.weight_bytes == (12 + 3 + 6 + 2) * 4
    assert w.activation_bytes == (4 + 3 + 3 + 2) * 4


def test_module_conv_macs():
    m = nn.Sequential(nn.Conv2d(2, 3, 3, bias=False))
    assert workload_from_module(m, (2, 5, 5)).macs == 27 * 18


def test_module_wrong_input_shape_is_a_user_error():
    with pytest.raises(EdgesmithError, match="cannot run"):
        workload_from_module(nn.Linear(4, 3), (5,))


def test_module_and_its_onnx_export_agree_on_macs(tmp_path):
    from edgesmith.compress.export_onnx import export_module_to_onnx

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).eval()
    export_module_to_onnx(m, np.zeros((1, 64), np.float32), tmp_path / "mlp.onnx")
    from_module = workload_from_module(m, (64,))
    from_onnx = workload_from_onnx(tmp_path / "mlp.onnx")
    assert from_module.macs == from_onnx.macs > 0
    assert from_module.n_layers == from_onnx.n_layers


def test_activity_workload_carries_counts():
    w = workload_from_activity({"synops": 100, "neuron_updates": 20, "messages": 5, "timesteps": 4}, 64)
    assert (w.synops, w.neuron_updates, w.messages, w.timesteps, w.weight_bytes) == (100, 20, 5, 4, 64)
    assert w.precision == "fixed"


@pytest.mark.parametrize("stats, match", [
    ({"synops": 1, "neuron_updates": 1, "messages": 1}, "timesteps"),
    ({"synops": -1, "neuron_updates": 1, "messages": 1, "timesteps": 1}, "non-negative"),
    ({"synops": 1, "neuron_updates": 1, "messages": 1, "timesteps": 0}, "positive whole"),
    ({"synops": "many", "neuron_updates": 1, "messages": 1, "timesteps": 1}, "not a number"),
])
def test_activity_rejects_bad_statistics(stats, match):
    with pytest.raises(EdgesmithError, match=match):
        workload_from_activity(stats, 10)


def test_shapes_inference_cannot_follow_are_read_off_one_run(tmp_path, monkeypatch):
    # torch exports Unflatten as a Shape/Slice/Concat chain that neither onnx nor onnxruntime's symbolic
    # inference resolves; the Conv after it still has to be counted
    net = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(288, 10))
    torch.onnx.export(net.eval(), (torch.zeros(2, 64),), str(tmp_path / "m.onnx"), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, opset_version=17, dynamo=False)
    monkeypatch.chdir(tmp_path)
    w = workload_from_onnx(tmp_path / "m.onnx", input_shapes={"x": [1, 64]})
    assert w.macs == 8 * 6 * 6 * 9 + 288 * 10 and w.n_layers == 2
    assert "read off one onnxruntime run" in w.source
    # onnxruntime's symbolic inference dumps a debug model and uuid .data files into the cwd when it gives up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_integer_matmul_to_float_is_counted(tmp_path):
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    inits = [numpy_helper.from_array(np.full((16, 4), 130, np.uint8), "w"),
             numpy_helper.from_array(np.float32(0.1), "sa"), numpy_helper.from_array(np.full(4, 0.2, np.float32), "sw"),
             numpy_helper.from_array(np.uint8(128), "za"), numpy_helper.from_array(np.full(4, 128, np.uint8), "zw")]
    node = helper.make_node("MatMulIntegerToFloat", ["a", "w", "sa", "sw", "za", "zw"], ["y"], domain="com.microsoft")
    model = helper.make_model(helper.make_graph([node], "g", [a], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(tmp_path / "q.onnx"))
    assert workload_from_onnx(tmp_path / "q.onnx").macs == 16 * 4


def test_onnx_lstm_macs_are_steps_times_input_and_recurrent_weights(tmp_path):
    hidden, inp, seq = 8, 5, 3
    inits = [numpy_helper.from_array(np.ones((1, 4 * hidden, inp), np.float32), "W"),
             numpy_helper.from_array(np.ones((1, 4 * hidden, hidden), np.float32), "R")]
    # batch-first input (one sample of seq steps), made time-first for the LSTM as torch's exporter does
    path = _save(tmp_path, [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
                            helper.make_node("LSTM", ["xt", "W", "R"], ["y"], hidden_size=hidden)],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, inp])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    w = workload_from_onnx(path)
    assert w.macs == seq * 4 * hidden * (inp + hidden) and w.n_layers == 1


def test_a_layer_whose_shapes_stay_unknown_is_left_out_and_named_not_fatal(tmp_path):
    # a MatMul whose weight is a run-time input of unknown shape: no count, and no run can give one (the graph
    # cannot run on the zeros it would be fed), so the estimate is a lower bound that says so
    inits = [numpy_helper.from_array(np.ones((4, 3), np.float32), "W")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("MatMul", ["h", "v"], ["y"], name="mystery")]
    path = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                   helper.make_tensor_value_info("v", TensorProto.FLOAT, None)],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    w = workload_from_onnx(path)
    assert w.macs == 12 and w.n_layers == 1
    assert "MACs of 1 layer(s) whose shapes stay unknown not counted, so a lower bound: mystery" in w.source
