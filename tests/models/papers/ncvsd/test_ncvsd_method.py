"""NCVSD method: effective-observation algebra, the closed-form teacher, the MMD, the stop-gradient."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ncvsd.config import GMMConfig, NetConfig, TrainConfig
from edgesmith.models.papers.ncvsd.gmm import GaussianMixture
from edgesmith.models.papers.ncvsd.nets import FakeDenoiser, Generator, LogVar
from edgesmith.models.papers.ncvsd.train import effective, mmd, pack_inputs, renoise_levels, vsd_loss


def test_y_eff_is_the_posterior_mean_of_two_gaussian_observations():
    # x ~ N(0, big) (flat prior) observed as y = x + sigma n and x_t = x + t eps: the posterior is
    # Gaussian with precision 1/sigma^2 + 1/t^2 and mean the precision-weighted average
    y, x_t = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 0.5]])
    sigma, t = torch.tensor([[0.5]]), torch.tensor([[2.0]])
    y_eff, s_eff = effective(y, sigma, x_t, t)
    prec = 1 / 0.25 + 1 / 4.0
    torch.testing.assert_close(s_eff, torch.tensor([[prec ** -0.5]]))
    torch.testing.assert_close(y_eff, (y / 0.25 + x_t / 4.0) / prec)


def test_sigma_eff_is_below_both_noise_levels():
    sigma = torch.logspace(-3, 2, 40, dtype=torch.float64).reshape(-1, 1)
    t = torch.logspace(2, -3, 40, dtype=torch.float64).reshape(-1, 1)
    zeros = torch.zeros(40, 1, dtype=torch.float64)
    _, s_eff = effective(zeros, sigma, zeros, t)
    assert torch.all(s_eff <= torch.minimum(sigma, t))
    assert torch.all(s_eff >= torch.minimum(sigma, t) / 2 ** 0.5 - 1e-12)  # equal levels halve the variance


def test_closed_form_denoiser_equals_monte_carlo_posterior_mean_in_1d():
    gmm = GaussianMixture(means=[[-1.0], [0.5], [2.0]], stds=[0.2, 0.4, 0.1], weights=[0.5, 0.3, 0.2])
    gen = torch.Generator().manual_seed(0)
    x0 = gmm.sample(400_000, gen).double()
    sigma = 0.5
    x_obs = torch.tensor([[-1.2], [0.3], [1.4]], dtype=torch.float64)
    # self-normalised importance weights p(x_obs | x0) over prior samples give E[x0 | x_obs]
    w = torch.exp(-0.5 * (x_obs.T - x0) ** 2 / sigma ** 2)  # [N, 3]
    mc = (w * x0).sum(0) / w.sum(0)
    torch.testing.assert_close(gmm.denoise(x_obs, sigma).reshape(-1), mc, atol=0.01, rtol=0)


def test_denoiser_is_identity_at_zero_noise_and_the_mean_at_huge_noise():
    gmm = GaussianMixture.from_config(GMMConfig())
    x = torch.randn(5, 2, dtype=torch.float64)
    torch.testing.assert_close(gmm.denoise(x, 1e-6), x, atol=1e-6, rtol=0)
    mean = (gmm.weights[:, None] * gmm.means).sum(0)
    torch.testing.assert_close(gmm.denoise(x, 1e5), mean.expand(5, 2), atol=1e-4, rtol=0)


def test_mmd_is_zero_for_identical_samples_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 2))
    assert mmd(a, a) == pytest.approx(0.0, abs=1e-6)
    near, far = mmd(a, a + 0.1), mmd(a, a + 1.0)
    assert 0 < near < far


def test_generator_gradient_flows_only_through_x():
    torch.manual_seed(0)
    gmm = GaussianMixture.from_config(GMMConfig())
    fake = FakeDenoiser(2, NetConfig(hidden=16, depth=1))
    x = torch.randn(8, 2, requires_grad=True)
    logvar = torch.zeros(8, 1, requires_grad=True)
    y, sigma = torch.randn(8, 2), torch.full((8, 1), 0.7)
    t, eps = torch.full((8, 1), 0.9), torch.randn(8, 2)
    vsd_loss(x, logvar, y, sigma, t, eps, gmm, fake, 0.5).sum().backward()
    assert all(p.grad is None for p in fake.parameters())
    with torch.no_grad():
        x_t = x + t * eps
        y_eff, s_eff = effective(y, sigma, x_t, t)
        direction = fake(x_t, t, y, sigma) - gmm.denoise(y_eff, s_eff)
    w = (t ** 2 + 0.25) / (0.5 * t) ** 2
    # d/dx of w e^-u ||x - sg(x + D_teacher - D_fake)||^2 is 2 w e^-u (D_fake - D_teacher)
    torch.testing.assert_close(x.grad, 2 * w * direction)


def test_generator_pack_matches_numpy_pack_and_runs_one_sample_per_row():
    g = Generator(2, NetConfig(hidden=16, depth=1)).eval()
    y, z = torch.randn(4, 2), torch.randn(4, 2)
    sigma = torch.tensor([[0.01], [1.0], [10.0], [80.0]])
    packed = g.pack(y, sigma, z)
    np.testing.assert_allclose(packed.numpy(), pack_inputs(y.numpy(), sigma.numpy(), z.numpy()), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        one_by_one = torch.cat([g(packed[i:i + 1]) for i in range(4)])
        torch.testing.assert_close(g(packed), one_by_one)
    assert LogVar(4)(sigma).shape == (4, 1)


def test_renoise_levels_decrease_and_one_step_has_none():
    assert renoise_levels(1) == []
    lv = renoise_levels(4)
    assert len(lv) == 3 and lv[0] > lv[1] > lv[2] > 0.002


def test_bad_configs_are_user_errors():
    with pytest.raises(EdgesmithError, match="sigma_sampler"):
        TrainConfig(sigma_sampler="uniform")
    with pytest.raises(EdgesmithError, match="vsd_t"):
        TrainConfig(vsd_t=(0.4, -1.0))
    with pytest.raises(EdgesmithError, match="std"):
        GMMConfig(std=0.0)
    with pytest.raises(EdgesmithError, match="no option"):
        TrainConfig.from_dict({"stepz": 3})
    cfg = TrainConfig(steps=7)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
