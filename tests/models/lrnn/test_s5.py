"""S5 model: the FFT-convolution recurrence equals the step loop, ZOH, conjugate symmetry, training helps."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser, sigmoid_pwl


def test_fft_convolution_equals_the_explicit_recurrence():
    m = S5Denoiser(S5Config(width=0.25, n_layers=1), seed=1)
    u = torch.randn(2, 40, m.cfg.d_model)
    ssm = m.blocks[0].ssm
    torch.testing.assert_close(ssm(u), ssm.step(u), atol=1e-4, rtol=1e-4)


def test_zoh_discretization_is_stable_and_matches_the_formula():
    ssm = S5Denoiser(S5Config(width=0.25, n_layers=1)).blocks[0].ssm
    lam_bar, b_bar = ssm.discrete()
    lam = torch.complex(-torch.exp(ssm.log_neg_re), ssm.im)
    dt = torch.exp(ssm.log_dt)
    torch.testing.assert_close(lam_bar, torch.exp(lam * dt))
    torch.testing.assert_close(b_bar, ((lam_bar - 1) / lam)[:, None] * torch.complex(ssm.B_re, ssm.B_im))
    assert torch.all(lam_bar.abs() < 1)


def test_output_is_real_through_conjugate_symmetry():
    # keeping one mode of each conjugate pair and taking 2 Re(C x) equals summing both modes
    ssm = S5Denoiser(S5Config(width=0.25, n_layers=1)).blocks[0].ssm
    u = torch.randn(1, 10, ssm.B_re.shape[1])
    lam, b = ssm.discrete()
    c = torch.complex(ssm.C_re, ssm.C_im)
    x = torch.zeros(lam.shape[0], dtype=torch.complex64)
    xc = torch.zeros_like(x)
    for k in range(10):
        x = lam * x + b @ u[0, k].to(torch.complex64)
        xc = lam.conj() * xc + b.conj() @ u[0, k].to(torch.complex64)
    both = c @ x + c.conj() @ xc
    assert float(both.imag.abs().max().detach()) < 1e-4
    torch.testing.assert_close(both.real, 2 * (c @ x).real)


def test_width_factor_scales_model_and_modes():
    assert S5Config(width=2.0).d_model == 128 and S5Config(width=2.0).modes == 64
    with pytest.raises(EdgesmithError, match="width"):
        S5Config(width=0.0)


def test_model_is_causal_in_time():
    m = S5Denoiser(S5Config(width=0.25, n_layers=2)).eval()
    x = torch.randn(1, 30, 257)
    y = x.clone()
    y[:, 20:] += 1.0
    with torch.no_grad():
        torch.testing.assert_close(m(x)[:, :20], m(y)[:, :20])


def test_pwl_sigmoid_is_close_to_sigmoid():
    x = torch.linspace(-10, 10, 1001)
    assert float((sigmoid_pwl(x) - torch.sigmoid(x)).abs().max()) < 0.045  # 8 segments of width 2: max error 0.041


def test_tiny_producer_trains_to_better_than_untrained():
    prod = get_producer("lrnn-denoiser", tiny=True).build()
    trained = prod.evaluate(lambda f: prod.module(torch.from_numpy(f)).detach().numpy(), split="train",
                            with_stoi=False)
    untrained = S5Denoiser(prod.model_cfg, seed=0).eval()
    before = prod.evaluate(lambda f: untrained(torch.from_numpy(f)).detach().numpy(), split="train",
                           with_stoi=False)
    assert prod.metric.name == "si_snri" and prod.metric.higher_is_better
    assert trained.value > before.value
    assert prod.input_shape == (63, 257)


def test_the_streaming_step_is_the_forward_pass_frame_by_frame_and_exports_to_onnx(tmp_path):
    import onnxruntime as ort

    from edgesmith.compress.export_step import export_step_onnx

    m = S5Denoiser(S5Config(width=0.25, n_layers=2), seed=3).eval()
    with torch.no_grad():  # non-trivial norm statistics, as after training
        for blk in m.blocks:
            blk.norm.running_mean.uniform_(-0.5, 0.5)
            blk.norm.running_var.uniform_(0.5, 2.0)
    f = torch.rand(2, 25, 257)
    with torch.no_grad():
        ref = m(f)
        state, outs = m.zero_state(2), []
        for t in range(25):
            o, state = m.step(f[:, t], state)
            outs.append(o)
    torch.testing.assert_close(torch.stack(outs, 1), ref, atol=1e-5, rtol=0)
    spec = export_step_onnx(m, tmp_path / "step.onnx")["recurrent"]
    assert spec["input"] == "frame" and spec["input_dtype"] == "float32"
    sess = ort.InferenceSession(str(tmp_path / "step.onnx"))
    feed = {n: np.zeros((2, *spec["state_shapes"][n]), np.float32) for n, _ in spec["state"]}
    outs = []
    for t in range(25):
        o, *new = sess.run(None, {"frame": f[:, t].numpy(), **feed})
        feed = dict(zip([n for n, _ in spec["state"]], new))
        outs.append(o)
    np.testing.assert_allclose(np.stack(outs, 1), ref.numpy(), atol=1e-5)


def test_a_short_evaluation_walks_every_noise_type_and_snr_and_keeps_the_weights():
    from edgesmith.common import EdgesmithError

    full = get_producer("lrnn-denoiser", tiny=True)
    short = get_producer("lrnn-denoiser", tiny=True, eval_clips=3, eval_clip_s=0.25)
    test = short.splits()["test"]
    assert test.noisy.shape == (3, 4000)
    assert short._cache_path() == full._cache_path()  # the same shipped weights serve both
    assert short.input_shape == (32, 257) and short.calibration_data(2).shape[1] == 32
    big = get_producer("lrnn-denoiser", eval_clips=10)._short_test(full.splits()["test"])
    assert len(big) == 4  # never more clips than the split holds
    from edgesmith.models.lrnn.data import NOISES, Split

    n = 15 * len(NOISES)  # the default test split's layout: types cycle clip by clip, SNRs every len(NOISES) clips
    layout = Split(np.zeros((n, 8)), np.zeros((n, 8)), np.tile(np.repeat([-5.0, 0, 5, 10, 15], len(NOISES)), 3),
                   np.array(list(NOISES) * 15))
    six = get_producer("lrnn-denoiser", eval_clips=6)._short_test(layout)
    assert len(set(six.snr_db.tolist())) == 5 and len(set(six.noise.tolist())) == 6  # not six clips at -5 dB
    with pytest.raises(EdgesmithError, match="eval_clips"):
        get_producer("lrnn-denoiser", eval_clips=0)
