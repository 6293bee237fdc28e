"""Lava runtime, its out-of-process worker and the bit-exact NumPy Sigma-Delta reference.

Tests marked ``lava`` start the Lava simulator in .venv-lava (a few seconds each); they fail, not
skip, when that env is missing, because the runtime's job is to run there.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.export_lava import ExportLavaConfig
from edgesmith.common import EdgesmithError
from edgesmith.runtimes import get_runtime
from edgesmith.runtimes import sigma_delta_ref as ref
from edgesmith.runtimes.lava_rt import LavaRuntime

N_DENSE, N_SPARSE = 16, 8


def _export(module, calib, workdir, input_shape=(64,)) -> Artifact:
    art = Artifact("torch", module=module, meta={"input_shape": list(input_shape)})
    out, _ = run_passes(art, [ExportLavaConfig()], PassContext(workdir=workdir, calibration=calib))
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


def test_lava_weights_drop_lowest_bit_of_mixed_sign_only():
    assert ref.lava_weights(np.array([[-7, 7, 300]])).tolist() == [[-8, 6, 254]]
    assert ref.lava_weights(np.array([[7, 300, 0]])).tolist() == [[7, 255, 0]]  # excitatory: clip, no truncation
    assert ref.lava_weights(np.array([[-7, -300]])).tolist() == [[-7, -255]]  # inhibitory


def test_reference_output_arrives_after_one_step_per_layer(lava_art, digits):
    net = ref.SigmaDeltaNet.load(lava_art.path)
    net.bias = [np.zeros_like(b) for b in net.bias]  # biases alone make every layer spike at step 0
    res = ref.simulate(net, ref.quantize_inputs(net, digits.test_data()[0][:1]))
    first = [int(np.flatnonzero(np.any(s != 0, axis=0))[0]) for s in res.layer_spikes]
    assert first == [1, 2, 3]  # input at step 0; each Dense adds one step of delay


def test_reference_agrees_with_fp32_on_the_test_set(lava_art, digits, fp32_logits):
    net = ref.SigmaDeltaNet.load(lava_art.path)
    out, stats = ref.run_float(net, digits.test_data()[0])
    agree = np.mean(out.argmax(1) == fp32_logits.argmax(1))
    # 360 samples in one time-multiplexed run; the floor of each weight_exp shift makes the state drift
    # (measured 359/360 agree), a sample-by-sample run agrees on all 360
    assert agree >= 0.99
    assert not any(stats["overflow"].values())


def test_reference_counts_are_consistent(lava_art, digits):
    net = ref.SigmaDeltaNet.load(lava_art.path)
    res = ref.simulate(net, ref.quantize_inputs(net, digits.test_data()[0][:4]))
    st = res.stats
    assert st["timesteps"] == 4 * net.steps_per_sample
    assert st["neuron_updates"] == (128 + 64 + 10) * st["timesteps"]
    assert st["messages"] == st["input_messages"] + sum(p["messages"] for p in st["per_layer"])
    assert [p["in_messages"] for p in st["per_layer"][1:]] == [p["messages"] for p in st["per_layer"][:-1]]
    # vth 0: one delta per neuron and sample, plus in the first window the bias turning on and the
    # earlier layers' bias deltas arriving (layer i: i + 1 extra changes)
    assert all(p["messages"] <= (4 + i + 1) * n for i, (p, n) in enumerate(zip(st["per_layer"], (128, 64, 10))))
    assert 0 < st["synops"] <= sum(p["in_messages"] * n for p, n in zip(st["per_layer"], (128, 64, 10)))


def test_missing_lava_env_names_make_setup(lava_art, monkeypatch, tmp_path):
    monkeypatch.setenv("EDGESMITH_LAVA_PYTHON", str(tmp_path / "no-such-python"))
    assert LavaRuntime.available()[0] is False
    with pytest.raises(EdgesmithError, match="make setup"):
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


def _assert_bit_exact(art: Artifact, x: np.ndarray, result) -> ref.SimResult:
    net = ref.SigmaDeltaNet.load(art.path)
    sim = ref.simulate(net, ref.quantize_inputs(net, x))
    lava_int = np.rint(result.outputs.astype(np.float64) / net.output_scale).astype(np.int64)
    assert np.abs(lava_int - sim.outputs).max() == 0
    assert np.array_equal(result.outputs, (sim.outputs * net.output_scale).astype(np.float32))
    for key in ("synops", "neuron_updates", "messages", "input_messages", "timesteps", "per_layer"):
        assert result.stats[key] == sim.stats[key], key
    return sim


@pytest.mark.lava
def test_lava_matches_reference_bit_for_bit_with_equal_counts(lava_art, dense_run):
    x, result = dense_run
    _assert_bit_exact(lava_art, x, result)
    assert result.stats["timesteps"] == N_DENSE * 4 and result.stats["sim_wall_s"] > 0
    assert [p["connection"] for p in result.stats["per_layer"]] == ["dense"] * 3


@pytest.mark.lava
def test_lava_predictions_agree_with_fp32(dense_run, fp32_logits):
    _, result = dense_run
    agree = int(np.sum(result.outputs.argmax(1) == fp32_logits[:N_DENSE].argmax(1)))
    assert agree >= N_DENSE - 1  # measured 16/16; one flip allowed for a near-tie
    # the de-scaled logits track the fp32 ones (8-bit weights, ~14-bit activations)
    assert np.abs(result.outputs - fp32_logits[:N_DENSE]).max() < 0.05 * np.abs(fp32_logits[:N_DENSE]).max()


@pytest.mark.lava
def test_pruned_model_runs_on_sparse_and_matches_reference(digits, tmp_path):
    art = _export(_prune(digits.module, 0.8), digits.calibration_data(), tmp_path)
    x = digits.test_data()[0][:N_SPARSE]
    result = get_runtime("lava").load(art).run(x)
    assert [p["connection"] for p in result.stats["per_layer"]] == ["sparse"] * 3
    sim = _assert_bit_exact(art, x, result)
    assert result.stats["per_layer"][0]["synapses"] <= 0.2 * 64 * 128 + 1
    assert sim.stats["synops"] > 0
