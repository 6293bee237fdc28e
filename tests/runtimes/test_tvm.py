"""TVM runtime: a module per input shape, the disk cache, threads, tuning, and errors that point to onnxruntime.

Untuned compiles of digits-mlp take well under a second. The one tuning test is marked slow:
MetaSchedule spends tens of seconds on a few trials (search, cost model, build and run workers).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgesmith.compress import Artifact
from edgesmith.common import EdgesmithError
from edgesmith.runtimes import get_runtime
from edgesmith.runtimes.tvm_rt import build_module, host_target

# Read before any test starts TVM's thread pool, which (with thread binding on) would pin this thread.
AFFINITY_AT_IMPORT = os.sched_getaffinity(0)


@pytest.fixture(autouse=True)
def tvm_cache(tmp_path, monkeypatch):
    """A private cache per test, so no test hits a library another test (or the user) compiled."""
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tvm"


@pytest.fixture(scope="module")
def digits_int4(digits_onnx, tmp_path_factory) -> Artifact:
    """digits-mlp with its MatMuls as onnxruntime's com.microsoft MatMulNBits (4-bit weights)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(onnx.load(str(digits_onnx.path)), block_size=32, is_symmetric=True, accuracy_level=4)
    q.process()
    path = tmp_path_factory.mktemp("tvm_int4") / "model.int4.onnx"
    q.model.save_model_to_file(str(path))
    return Artifact("onnx", path=path, meta=dict(digits_onnx.meta))


def _x(digits, n: int) -> np.ndarray:
    return digits.test_data()[0][:n]


def _onnxruntime(art: Artifact, x: np.ndarray) -> np.ndarray:
    return get_runtime("onnxruntime", threads=1).load(art).run(x).outputs


def test_first_run_compiles_for_its_batch_and_reports_compile_stats(digits, digits_onnx, tvm_cache):
    res = get_runtime("tvm", threads=1).load(digits_onnx).run(_x(digits, 8))
    s = res.stats
    assert res.outputs.shape == (8, 10)
    assert s["runtime"] == "tvm" and s["batch"] == 8 and s["threads"] == 1
    assert s["cache_hit"] is False and s["compile_s"] > 0
    assert s["tune_trials"] == 0 and s["tuned_kernels"] == 0 and s["kernels"] >= 3  # one fused kernel per layer
    target = json.loads(s["target"])
    assert target["kind"] == "llvm" and target["num-cores"] == 1
    assert [p.name for p in tvm_cache.glob("*.so")] == [p.with_suffix(".so").name for p in tvm_cache.glob("*.json")]
    assert len(list(tvm_cache.glob("*.so"))) == 1


def test_second_runtime_instance_loads_the_library_from_disk_without_compiling(digits, digits_onnx):
    x = _x(digits, 4)
    first = get_runtime("tvm", threads=1).load(digits_onnx).run(x)
    second = get_runtime("tvm", threads=1).load(digits_onnx).run(x)
    assert first.stats["cache_hit"] is False and first.stats["compile_s"] > 0
    assert second.stats["cache_hit"] is True and second.stats["compile_s"] == 0
    np.testing.assert_array_equal(second.outputs, first.outputs)


def test_damaged_cache_entry_is_rebuilt_not_fatal(digits, digits_onnx, tvm_cache):
    x = _x(digits, 3)
    first = get_runtime("tvm", threads=1).load(digits_onnx).run(x)
    (lib,) = tvm_cache.glob("*.so")
    # a new, damaged file in its place (as another TVM build would leave): the library this process has
    # mapped stays intact, as the toolkit's own atomic writes guarantee
    lib.unlink()
    lib.write_bytes(b"truncated")
    again = get_runtime("tvm", threads=1).load(digits_onnx).run(x)
    assert again.stats["cache_hit"] is False and lib.stat().st_size > 1000
    np.testing.assert_array_equal(again.outputs, first.outputs)


def test_another_batch_compiles_its_own_module_and_both_stay_in_memory(digits, digits_onnx, tvm_cache):
    rt = get_runtime("tvm", threads=1).load(digits_onnx)
    x = _x(digits, 5)
    one, five, one_again = rt.run(x[:1]), rt.run(x), rt.run(x[:1])
    assert sorted(shape[0] for shape in rt.modules_) == [1, 5]
    assert len(list(tvm_cache.glob("*.so"))) == 2
    assert (one.stats["batch"], five.stats["batch"]) == (1, 5)
    np.testing.assert_array_equal(one_again.outputs, one.outputs)
    # batch 1 and batch 5 run different kernels (GEMV vs matmul schedules): fp32 rounding only
    np.testing.assert_allclose(five.outputs[:1], one.outputs, rtol=0, atol=1e-4)


def test_cache_key_includes_the_thread_count_of_the_target(digits, digits_onnx, tvm_cache):
    for threads in (1, 2):
        get_runtime("tvm", threads=threads).load(digits_onnx).run(_x(digits, 2))
    assert len(list(tvm_cache.glob("*.so"))) == 2


def test_threads_option_sizes_the_pool_and_leaves_env_and_affinity_alone(digits, digits_onnx, monkeypatch):
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    used = [get_runtime("tvm", threads=n).load(digits_onnx).run(_x(digits, 2)).stats["threads"] for n in (1, 2, 1)]
    assert used == [1, 2, 1]
    assert "TVM_NUM_THREADS" not in os.environ
    assert os.sched_getaffinity(0) == AFFINITY_AT_IMPORT


def test_default_threads_follow_tvm_num_threads(digits, digits_onnx, monkeypatch):
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    res = get_runtime("tvm").load(digits_onnx).run(_x(digits, 2))
    assert res.stats["threads"] == 1 and json.loads(res.stats["target"])["num-cores"] == 1
    assert os.environ["TVM_NUM_THREADS"] == "1"


def test_host_target_names_this_cpu_when_llvm_knows_it():
    from tvm.target import codegen

    target = json.loads(str(host_target(3)))
    assert target["num-cores"] == 3
    assert target.get("mcpu", "generic") == str(codegen.llvm_get_system_cpu())


def test_matmulnbits_model_is_refused_at_load_naming_the_op_and_onnxruntime(digits_int4):
    with pytest.raises(EdgesmithError) as e:
        get_runtime("tvm").load(digits_int4)
    assert "com.microsoft.MatMulNBits" in e.value.problem
    assert "onnxruntime" in e.value.fix


def test_importer_rejection_becomes_an_edgesmith_error_too(digits_int4):
    # build_module meets the importer's own check (the load-time check is skipped here)
    with pytest.raises(EdgesmithError) as e:
        build_module(onnx.load(str(digits_int4.path)), "input", (1, 64), host_target(1), 0, what="int4 model")
    assert "MatMulNBits" in e.value.problem and "onnxruntime" in e.value.fix


def test_unreadable_onnx_file_is_an_edgesmith_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(EdgesmithError, match="not a readable ONNX model"):
        get_runtime("tvm").load(Artifact("onnx", path=bad))


def test_model_with_two_inputs_is_refused(tmp_path):
    a, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("a", "b"))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "two_inputs", [a, b], [out])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(EdgesmithError, match="2 inputs"):
        get_runtime("tvm").load(Artifact("onnx", path=path))


def test_a_model_that_takes_int64_token_ids_runs_and_matches_onnxruntime(tmp_path):
    # the input buffer was always float32: "expect Tensor with dtype int64 but get float32" for any embedding model
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", 6])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 6, 4])
    table = onnx.numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"])], "emb", [ids], [out], [table])
    path = tmp_path / "emb.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    art = Artifact("onnx", path=path)
    x = np.random.default_rng(0).integers(0, 10, (3, 6)).astype(np.int64)
    got = get_runtime("tvm").load(art).run(x).outputs
    np.testing.assert_array_equal(got, _onnxruntime(art, x))


@pytest.mark.parametrize("options", [{"tune_trials": -1}, {"tune_trials": 2.5}, {"tune_trails": 8}])
def test_bad_options_are_refused_at_load(digits_onnx, options):
    with pytest.raises(EdgesmithError, match="tune_trials"):
        get_runtime("tvm", **options).load(digits_onnx)


@pytest.mark.slow
def test_tuning_with_a_few_trials_tunes_kernels_matches_onnxruntime_and_is_cached(tmp_path, tvm_cache):
    # one MatMul: MetaSchedule tunes one task instead of the MLP's several, the same code path at half the time
    from edgesmith.bench.fuzz import matmul_onnx

    one = Artifact("onnx", path=matmul_onnx(tmp_path / "mm.onnx", 64, 10), meta={"input_shape": [64]})
    x = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
    tuned = get_runtime("tvm", threads=1, tune_trials=4).load(one).run(x)
    s = tuned.stats
    assert s["tune_trials"] == 4 and s["cache_hit"] is False
    assert s["tuned_kernels"] >= 1  # at least one candidate built and ran; all failing would leave 0
    intrinsics = sys.modules.get("tvm.s_tir.tensor_intrin")
    assert intrinsics is None or hasattr(intrinsics, "cuda")  # the CPU-only stand-in is gone again
    # tuned schedules reorder the fp32 sums: rounding-level differences only
    np.testing.assert_allclose(tuned.outputs, _onnxruntime(one, x), rtol=0, atol=1e-4)
    assert [p.name.split("-")[-2] for p in tvm_cache.glob("*.so")] == ["t4"]
    again = get_runtime("tvm", threads=1, tune_trials=4).load(one).run(x)
    assert again.stats["cache_hit"] is True and again.stats["compile_s"] == 0
    assert again.stats["tuned_kernels"] == s["tuned_kernels"]
    np.testing.assert_array_equal(again.outputs, tuned.outputs)
