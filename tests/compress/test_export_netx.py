"""export-netx: torch Linear/ReLU MLP -> netx HDF5 Sigma-Delta network (lava-dl's layout)."""
from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from torch import nn

from edgesmith.compress import Artifact, PassContext, config_from_json, run_passes
from edgesmith.compress.export_netx import SIGMA_PEAK, ExportNetxConfig
from edgesmith.common import EdgesmithError
from edgesmith.compress import netx_format as netx_ref


def _export(art: Artifact, calib: np.ndarray, workdir, **cfg):
    ctx = PassContext(workdir=workdir, calibration=calib)
    out, reports = run_passes(art, [ExportNetxConfig(**cfg)], ctx)
    return out, reports[0]


@pytest.fixture(scope="module")
def exported(digits, digits_torch, tmp_path_factory):
    return _export(digits_torch, digits.calibration_data(), tmp_path_factory.mktemp("netx_export"))


def test_export_writes_lava_dl_layout(exported):
    art, _ = exported
    assert art.format == "netx" and art.path.name == "model.net"
    with h5py.File(art.path) as f:
        layers = f["layer"]
        assert sorted(layers.keys()) == ["0", "1", "2", "3"]
        assert layers["0/type"][0] == b"input" and layers["0/shape"][()].tolist() == [64]  # 1-D, as lava-dl writes
        assert layers["0/neuron/type"][()] == b"SDNN"
        for i, n in zip("123", (128, 64, 10)):
            assert layers[f"{i}/type"][0] == b"dense" and layers[f"{i}/shape"][()].tolist() == [n]
            w = layers[f"{i}/weight"][()]
            assert w.dtype.kind == "i" and np.abs(w).max() <= 127
        # hidden layers carry biases inside netx's int32 range once shifted by 12 bits; the output layer is a
        # Sigma accumulator, which netx cannot give a bias
        for i in "12":
            assert np.abs(layers[f"{i}/bias"][()]).max() < 2 ** 15
        assert "sigma_output" in layers["3/neuron"] and "bias" not in layers["3"]
        meta = f["edgesmith"]
        assert meta["output_bias"].shape == (10,) and int(meta["timesteps_per_sample"][()]) == 4


def test_export_keeps_the_float_model_accuracy(exported, digits):
    art, report = exported
    net = netx_ref.NetxNet.load(art.path)
    x, y = digits.test_data()
    with torch.no_grad():
        fp32 = digits.module(torch.from_numpy(x)).numpy()
    out, stats = netx_ref.run_float(net, x)
    # measured: 360/360 predictions agree with fp32 (96.9% accuracy both), output SQNR about 37 dB
    assert np.mean(out.argmax(1) == fp32.argmax(1)) >= 0.99
    assert report.extra["calibration_output_sqnr_db"] > 30
    assert not any(stats["overflow"].values())


def test_input_scale_search_keeps_every_hidden_state_under_its_cap(exported, digits):
    art, report = exported
    net = netx_ref.NetxNet.load(art.path)
    res = netx_ref.simulate(net, netx_ref.quantize_inputs(net, digits.calibration_data()))
    assert res.stats["peak_state"] < 2 ** 23
    for p in res.stats["per_layer"][:-1]:
        assert p["max_abs_message"] <= SIGMA_PEAK >> 6  # the messages' 16-bit payload holds them
    scales = [row["input_scale"] for row in report.extra["input_scale_search"]]
    assert all(b == 2 * a for a, b in zip(scales, scales[1:]))  # powers of two, finest first
    chosen = max((r for r in report.extra["input_scale_search"] if r["fits"]), key=lambda r: r["output_sqnr_db"])
    assert report.extra["input_scale"] == chosen["input_scale"]


def test_export_report_has_weight_error_per_layer(exported):
    _, report = exported
    assert [layer.name for layer in report.layers] == ["0", "2", "4"]
    for layer in report.layers:
        assert layer.error["weight_sqnr_db"] > 15 and 2 <= layer.error["weight_bits_used"] <= 8


def test_export_is_deterministic(digits, digits_torch, tmp_path):
    a, _ = _export(digits_torch, digits.calibration_data(), tmp_path / "a")
    b, _ = _export(digits_torch, digits.calibration_data(), tmp_path / "b")
    with h5py.File(a.path) as fa, h5py.File(b.path) as fb:
        def items(f):
            out = {}
            f.visititems(lambda name, obj: out.update({name: obj[()]}) if isinstance(obj, h5py.Dataset) else None)
            return out
        ia, ib = items(fa), items(fb)
        assert ia.keys() == ib.keys() and all(np.array_equal(ia[k], ib[k]) for k in ia)


def test_last_layer_with_relu_stays_a_sigma_delta_layer(digits, tmp_path):
    module = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10), nn.ReLU())
    torch.manual_seed(0)
    art, _ = _export(Artifact("torch", module=module), digits.calibration_data(), tmp_path)
    net = netx_ref.NetxNet.load(art.path)
    assert [lyr.sigma_output for lyr in net.layers] == [False, False]
    x = digits.test_data()[0][:8]
    out, _ = netx_ref.run_float(net, x)
    with torch.no_grad():
        fp32 = module(torch.from_numpy(x)).numpy()
    # read as the running sum of its messages; each message is floored (act >> 6), so a neuron that falls
    # back to 0 can end a few LSBs below it
    assert np.abs(out - fp32).max() < 0.05 * np.abs(fp32).max()
    assert out.min() > -10 * net.output_scale


def test_hidden_layer_without_relu_is_refused(digits, tmp_path):
    module = nn.Sequential(nn.Linear(64, 16), nn.Linear(16, 10))
    with pytest.raises(EdgesmithError, match=r"hidden layer\(s\) 0 have no ReLU"):
        _export(Artifact("torch", module=module), digits.calibration_data(), tmp_path)


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
        run_passes(digits_torch, [ExportNetxConfig()], PassContext(workdir=tmp_path))


def test_window_shorter_than_network_delay_is_rejected(digits, digits_torch, tmp_path):
    with pytest.raises(EdgesmithError, match="steps_per_sample"):
        _export(digits_torch, digits.calibration_data(), tmp_path, steps_per_sample=3)


@pytest.mark.parametrize("field,value", [("vth", -1), ("vth", 2 ** 11), ("vth", 1.5), ("steps_per_sample", 1)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(EdgesmithError, match=field):
        ExportNetxConfig(**{field: value})


def test_config_round_trips_through_json():
    cfg = ExportNetxConfig(vth=2, steps_per_sample=6)
    assert config_from_json(cfg.to_json()) == cfg
