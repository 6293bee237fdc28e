"""Lava runtime (netx networks loaded by lava-dl in .venv-lava) and its bit-exact NumPy reference.

Tests marked ``lava`` start the Lava simulator in .venv-lava (a few seconds each); they fail, not
skip, when that env is missing, because the runtime's job is to run there.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.export_netx import ExportNetxConfig
from edgesmith.common import EdgesmithError
from edgesmith.runtimes import get_runtime
from edgesmith.compress import netx_format as ref
from edgesmith.runtimes.lava_rt import LavaRuntime

N_DENSE, N_SPARSE = 16, 8


def _export(module, calib, workdir, input_shape=(64,), **cfg) -> Artifact:
    art = Artifact("torch", module=module, meta={"input_shape": list(input_shape)})
    out, _ = run_passes(art, [ExportNetxConfig(**cfg)], PassContext(workdir=workdir, calibration=calib))
    return out


def _prune(module: torch.nn.Module, fraction: float) -> torch.nn.Module:
    """Zero the smallest-magnitude ``fraction`` of each Linear's weights."""
    module = copy.deepcopy(module)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.Linear):
                k = int(np.ceil(fraction * m.weight.numel()))
                cut = m.weight.abs().flatten().kthvalue(k).values
                m.weight[m.weight.abs() <= cut] = 0.0
    return module


@pytest.fixture(scope="module")
def lava_art(digits, tmp_path_factory) -> Artifact:
    return _export(digits.module, digits.calibration_data(), tmp_path_factory.mktemp("lava_rt"))


@pytest.fixture(scope="module")
def fp32_logits(digits):
    x = digits.test_data()[0]
    with torch.no_grad():
        return digits.module(torch.from_numpy(x)).numpy()


# --- reference model alone (no Lava needed) -----------------------------------------------------------


# expected values: what lava-dl 0.6's optimize_weight_bits plus Lava 0.10's clip/truncate give (checked in .venv-lava)
@pytest.mark.parametrize("w,expected,exp,bits", [
    ([[-7, 7, 100]], [[-14, 14, 200]], -1, 8),  # mixed: 127/100 -> one bit left; odd weights keep 8 bits
    ([[-6, 6, 50]], [[-24, 24, 200]], -2, 6),  # mixed, even: two bits left, the common zero bit is dropped
    ([[7, 100, 0]], [[14, 200, 0]], -1, 7),  # excitatory: 255/100
    ([[0, -7, -100]], [[0, -14, -200]], -1, 8),  # max 0: netx calls it mixed (-128/min), Lava inhibitory
    ([[-3, -100]], [[-6, -200]], -1, 7),  # inhibitory: -256/min
])
def test_netx_weights_follow_netx_then_lava(w, expected, exp, bits):
    lava_w, wexp, nbits = ref.netx_weights(np.array(w))
    assert (lava_w.tolist(), wexp, nbits) == (expected, exp, bits)


def test_reference_output_arrives_after_one_step_per_layer(lava_art, digits):
    net = ref.NetxNet.load(lava_art.path)
    for lyr in net.layers:
        lyr.bias = np.zeros_like(lyr.bias)  # biases alone make every layer spike at step 0
    res = ref.simulate(net, ref.quantize_inputs(net, digits.test_data()[0][:1]))
    first = [int(np.flatnonzero(np.any(m != 0, axis=0))[0]) for m in res.layer_messages]
    assert first == [1, 2, 3]  # input at step 0; each Dense adds one step of delay


def test_reference_agrees_with_fp32_on_the_test_set(lava_art, digits, fp32_logits):
    net = ref.NetxNet.load(lava_art.path)
    out, stats = ref.run_float(net, digits.test_data()[0])
    # 360 samples in one time-multiplexed run; measured 360/360 agree
    assert np.mean(out.argmax(1) == fp32_logits.argmax(1)) >= 0.99
    assert not any(stats["overflow"].values())


def test_reference_counts_are_consistent(lava_art, digits):
    net = ref.NetxNet.load(lava_art.path)
    res = ref.simulate(net, ref.quantize_inputs(net, digits.test_data()[0][:4]))
    st = res.stats
    assert st["timesteps"] == 4 * net.steps_per_sample
    assert st["neuron_updates"] == (128 + 64 + 10) * st["timesteps"]
    assert st["messages"] == st["input_messages"] + sum(p["messages"] for p in st["per_layer"])
    assert [p["in_messages"] for p in st["per_layer"][1:]] == [p["messages"] for p in st["per_layer"][:-1]]
    # vth 0: the encoder sends each changed input once per sample
    assert st["input_messages"] <= 4 * 64
    assert 0 < st["synops"] <= sum(p["in_messages"] * n for p, n in zip(st["per_layer"], (128, 64, 10)))


def test_foreign_files_are_refused_by_layer_and_reason(tmp_path):
    import h5py

    path = tmp_path / "conv.net"
    with h5py.File(path, "w") as f:
        f.create_dataset("layer/0/type", (1,), "S10", [b"input"])
        f.create_dataset("layer/1/type", (1,), "S10", [b"conv"])
        f.create_dataset("layer/2/type", (1,), "S10", [b"pool"])
    with pytest.raises(EdgesmithError, match=r"layer 1 \(conv\), layer 2 \(pool\)"):
        ref.NetxNet.load(path)
    (tmp_path / "not.net").write_bytes(b"not hdf5")
    with pytest.raises(EdgesmithError, match="not a readable HDF5"):
        ref.NetxNet.load(tmp_path / "not.net")


def test_missing_lava_env_names_make_setup(lava_art, monkeypatch, tmp_path):
    monkeypatch.setenv("EDGESMITH_LAVA_PYTHON", str(tmp_path / "no-such-python"))
    assert LavaRuntime.available()[0] is False
    with pytest.raises(EdgesmithError, match="run `edgesmith setup lava`.*`make setup` in a source checkout"):
        get_runtime("lava")
    rt = LavaRuntime().load(lava_art)  # constructed directly: the run still explains the fix
    with pytest.raises(EdgesmithError, match="make setup"):
        rt.run(np.zeros((1, 64), np.float32))


def test_failing_worker_error_carries_its_last_stderr_line(lava_art, monkeypatch, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'Traceback ...' >&2\necho 'ImportError: no module named lava' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("EDGESMITH_LAVA_PYTHON", str(fake))
    with pytest.raises(EdgesmithError, match="no module named lava"):
        get_runtime("lava").load(lava_art).run(np.zeros((1, 64), np.float32))


def test_lava_runtime_rejects_wrong_input_width(lava_art):
    with pytest.raises(EdgesmithError, match="shape"):
        LavaRuntime().load(lava_art).run(np.zeros((1, 32), np.float32))


# --- the Lava simulator --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dense_run(lava_art, digits):
    x = digits.test_data()[0][:N_DENSE]
    return x, get_runtime("lava").load(lava_art).run(x)


def assert_bit_exact(art: Artifact, x: np.ndarray, result) -> ref.SimResult:
    """Lava's integers, floats and counts equal the reference's (max difference 0)."""
    ref_run = get_runtime("netx-ref").load(art).run(x)
    assert np.abs(result.named["output_int"] - ref_run.named["output_int"]).max() == 0
    assert np.array_equal(result.outputs, ref_run.outputs)
    for key in ("synops", "neuron_updates", "messages", "input_messages", "timesteps", "per_layer"):
        assert result.stats[key] == ref_run.stats[key], key
    assert result.stats["reference_weights_match"]  # netx built the synapses the reference modelled
    return ref_run


@pytest.mark.lava
def test_lava_matches_reference_bit_for_bit_with_equal_counts(lava_art, dense_run):
    x, result = dense_run
    assert_bit_exact(lava_art, x, result)
    assert result.stats["timesteps"] == N_DENSE * 4 and result.stats["sim_wall_s"] > 0
    assert [lyr["neuron"] for lyr in result.stats["lava_layers"]] == ["SigmaDelta", "SigmaDelta", "Sigma"]
    assert not result.stats["sparse_synapses"]


@pytest.mark.lava
def test_lava_predictions_agree_with_fp32(dense_run, fp32_logits):
    _, result = dense_run
    agree = int(np.sum(result.outputs.argmax(1) == fp32_logits[:N_DENSE].argmax(1)))
    assert agree == N_DENSE  # measured 16/16
    assert np.abs(result.outputs - fp32_logits[:N_DENSE]).max() < 0.05 * np.abs(fp32_logits[:N_DENSE]).max()


@pytest.mark.lava
def test_pruned_model_runs_on_sparse_synapses_and_matches_reference(digits, tmp_path):
    art = _export(_prune(digits.module, 0.8), digits.calibration_data(), tmp_path)
    x = digits.test_data()[0][:N_SPARSE]
    result = get_runtime("lava").load(art).run(x)
    assert result.stats["sparse_synapses"] and [lyr["synapse"] for lyr in result.stats["lava_layers"]] == ["Sparse"] * 3
    assert_bit_exact(art, x, result)
    assert result.stats["per_layer"][0]["synapses"] <= 0.2 * 64 * 128 + 1


@pytest.mark.lava
def test_threshold_makes_fewer_messages_and_stays_bit_exact(digits, tmp_path):
    art = _export(digits.module, digits.calibration_data(), tmp_path, vth=4)
    x = digits.test_data()[0][:N_SPARSE]
    result = get_runtime("lava").load(art).run(x)
    assert_bit_exact(art, x, result)
    base = get_runtime("netx-ref").load(_export(digits.module, digits.calibration_data(), tmp_path / "b")).run(x)
    assert result.stats["messages"] < base.stats["messages"]
