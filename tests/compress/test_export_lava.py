"""export-lava: torch Linear/ReLU MLP -> fixed-point Sigma-Delta network description (.npz)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from edgesmith.compress import Artifact, PassContext, config_from_json, run_passes
from edgesmith.compress.export_lava import ExportLavaConfig, quantize_weights
from edgesmith.common import EdgesmithError


def _export(art: Artifact, calib: np.ndarray, workdir, **cfg):
    ctx = PassContext(workdir=workdir, calibration=calib)
    out, reports = run_passes(art, [ExportLavaConfig(**cfg)], ctx)
    return out, reports[0]


@pytest.fixture(scope="module")
def exported(digits, digits_torch, tmp_path_factory):
    return _export(digits_torch, digits.calibration_data(), tmp_path_factory.mktemp("lava_export"))


def test_export_writes_npz_with_documented_schema(exported):
    art, _ = exported
    assert art.format == "lava" and art.path.name == "model.lava.npz"
    with np.load(art.path, allow_pickle=False) as z:
        assert str(z["format"]) == "edgesmith-lava-sdn" and int(z["schema_version"]) == 1
        n = int(z["n_layers"])
        assert n == 3 and int(z["timesteps_per_sample"]) == n + 1  # one step of delay per Dense
        assert z["relu"].tolist() == [True, True, False]  # output layer is linear (UNIT mode)
        assert int(z["weight_bits"]) == 8 and int(z["activation_bits"]) == 16
        for i in range(n):
            q = z[f"weights_{i}"]
            assert q.dtype == np.int8 and np.abs(q).max() == 127  # symmetric max-abs scale uses the full range
            assert z[f"bias_{i}"].dtype == np.int32
        assert all(e <= 0 for e in z["weight_exp"].tolist())
        assert not z["sparse"].any()
        for key in ("vth", "spike_exp", "state_exp", "cum_error", "weight_scale", "act_scale", "layer_names"):
            assert z[key].shape == (n,)
        # output de-scaling is the last layer's activation unit
        assert float(z["output_scale"]) == pytest.approx(float(z["act_scale"][-1]))


def test_export_report_has_bits_and_weight_sqnr_per_layer(exported):
    _, report = exported
    assert report.bits_per_weight == 8.0
    assert [layer.name for layer in report.layers] == ["0", "2", "4"]
    for layer in report.layers:
        # 8-bit symmetric quantization of trained weights: about 6 dB per bit, minus the peak-to-rms ratio
        assert 30.0 < layer.error["weight_sqnr_db"] < 60.0
        assert layer.bits_per_weight == 8.0 and layer.n_params > 0


def test_activation_scale_keeps_calibration_peak_within_payload(digits, exported):
    art, _ = exported
    with np.load(art.path) as z:
        w0, s0 = z["weights_0"].astype(np.float64), float(z["act_scale"][0])
        x = digits.calibration_data()
        x_int = np.rint(x / float(z["input_scale"]))
        acc = (x_int @ (2 * w0).T) / 2.0 ** -int(z["weight_exp"][0]) + z["bias_0"]
        peak = np.maximum(acc, 0).max()
    # the chosen shift is the smallest that fits 2**14, so the peak lands in (2**13, 2**14] (+ rounding)
    assert 2 ** 12 < peak <= 2 ** 14 * 1.01
    assert s0 > 0


def test_export_is_deterministic(digits, digits_torch, tmp_path):
    a, _ = _export(digits_torch, digits.calibration_data(), tmp_path / "a")
    b, _ = _export(digits_torch, digits.calibration_data(), tmp_path / "b")
    with np.load(a.path) as za, np.load(b.path) as zb:
        assert za.files == zb.files
        for k in za.files:
            assert np.array_equal(za[k], zb[k]), k


def test_pruned_layers_become_sparse(digits, digits_torch, tmp_path):
    module = copy.deepcopy(digits_torch.module)
    with torch.no_grad():
        lin = module[0]
        cut = lin.weight.abs().flatten().kthvalue(int(np.ceil(0.8 * lin.weight.numel()))).values
        lin.weight[lin.weight.abs() <= cut] = 0.0
    art, report = _export(Artifact("torch", module=module), digits.calibration_data(), tmp_path)
    with np.load(art.path) as z:
        assert z["sparse"].tolist() == [True, False, False]
        assert np.mean(z["weights_0"] == 0) >= 0.8
    assert report.layers[0].error["zero_fraction"] >= 0.8


def test_unsupported_layer_is_rejected_by_name(digits, tmp_path):
    module = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Conv1d(1, 1, 3))
    with pytest.raises(EdgesmithError, match=r"'2'.*Conv1d"):
        _export(Artifact("torch", module=module), digits.calibration_data(), tmp_path)


def test_relu_before_first_linear_is_rejected(digits, tmp_path):
    module = nn.Sequential(nn.ReLU(), nn.Linear(64, 10))
    with pytest.raises(EdgesmithError, match="before any Linear"):
        _export(Artifact("torch", module=module), digits.calibration_data(), tmp_path)


def test_export_needs_calibration(digits_torch, tmp_path):
    with pytest.raises(EdgesmithError, match="calibration"):
        run_passes(digits_torch, [ExportLavaConfig()], PassContext(workdir=tmp_path))


def test_window_shorter_than_network_delay_is_rejected(digits, digits_torch, tmp_path):
    with pytest.raises(EdgesmithError, match="steps_per_sample"):
        _export(digits_torch, digits.calibration_data(), tmp_path, steps_per_sample=3)


@pytest.mark.parametrize("field,value", [("weight_bits", 4), ("activation_bits", 32), ("vth", -1),
                                         ("steps_per_sample", 1), ("sparse_threshold", 1.5)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(EdgesmithError, match=field):
        ExportLavaConfig(**{field: value})


def test_config_round_trips_through_json():
    cfg = ExportLavaConfig(vth=2, steps_per_sample=6, sparse_threshold=0.7)
    assert config_from_json(cfg.to_json()) == cfg


def test_quantize_weights_is_symmetric_max_abs():
    w = np.array([[0.5, -1.0], [0.25, 0.0]])
    q, s = quantize_weights(w)
    assert s == pytest.approx(1.0 / 127)
    assert q.tolist() == [[64, -127], [32, 0]]
