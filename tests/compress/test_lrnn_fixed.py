"""w8a16 conversion of the S5 denoiser: integer ranges, closeness to float, QAT, file round trip."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.compress.lrnn import fixed as F
from edgesmith.common import EdgesmithError
from edgesmith.models.lrnn.data import DataConfig, features, load_splits, stft
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser
from edgesmith.models.lrnn.train import TrainConfig
from edgesmith.runtimes.lrnn_ref import run_clips


@pytest.fixture(scope="module")
def setup():
    splits = load_splits(DataConfig.tiny())
    feat = features(stft(splits["train"].noisy).abs()).numpy()
    model = S5Denoiser(S5Config(width=0.25, n_layers=2), seed=0).eval()
    return model, feat, F.convert(model, feat)


def test_weights_are_8_bit_and_recurrence_16_bit(setup):
    _, _, net = setup
    for k in ("enc_w", "b_re", "b_im", "c_re", "c_im", "d_w", "w1", "w2", "dec_w"):
        assert np.abs(net[k]).max() <= 254 and np.all(net[k] % 2 == 0), k  # Lava's even 8-bit synapses
    assert np.abs(net["lam_re"]).max() < 2 ** 15 and np.abs(net["lam_im"]).max() < 2 ** 15
    assert np.all(net["b_m"] < 2 ** 15) and np.all(net["b_s"] >= 1)


def test_folded_float_network_equals_the_torch_model(setup):
    model, feat, _ = setup
    with torch.no_grad():
        ref = model(torch.from_numpy(feat)).numpy()
    np.testing.assert_allclose(F.float_trace(F.float_params(model), feat)["mask"], ref, atol=1e-4)


def test_fixed_point_mask_is_close_to_float(setup):
    model, feat, net = setup
    with torch.no_grad():
        ref = model(torch.from_numpy(feat)).numpy()
    masks, stats = run_clips(net, F.quantize_features(net, feat))
    err = np.abs(masks * float(net["mask_scale"]) - ref).max()
    assert err < 0.03 * np.abs(ref).max()
    assert not stats["overflow_int32_accumulator"]


def test_net_file_round_trips_and_rejects_other_files(setup, tmp_path):
    _, _, net = setup
    path = F.save_net(net, tmp_path / "net.npz")
    back = F.load_net(path)
    assert all(np.array_equal(back[k], net[k]) for k in net)
    np.savez(tmp_path / "other.npz", a=np.zeros(2))
    with pytest.raises(EdgesmithError, match="not an"):
        F.load_net(tmp_path / "other.npz")


def test_requant_approximates_the_ratio():
    for r in (1e-6, 0.013, 0.7, 3.0):
        m, s = F.requant(r)
        assert m < 2 ** 15 and abs(m / 2 ** s - r) <= r * 2 ** -13


def test_qat_trains_with_fake_quant_then_switches_it_off():
    splits = load_splits(DataConfig.tiny())
    model = S5Denoiser(S5Config(width=0.25, n_layers=1))
    seen = []
    F.qat_finetune(model, splits["train"], TrainConfig(epochs=1, batch=4), after_step=lambda s, t: seen.append(model.quant))
    assert seen and all(seen) and model.quant is False
