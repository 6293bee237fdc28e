"""EQ-VAE method: one transform for latent and image, exact equivariance of a symmetric toy decoder, data."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import edgesmith.models.papers.eqvae.train as eqtrain
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.eqvae.config import AEConfig, ShapesConfig, TrainConfig
from edgesmith.models.papers.eqvae.model import VAE, Transform, sample_transform, scales
from edgesmith.models.papers.eqvae.shapes import load_splits, make_images
from edgesmith.models.papers.eqvae.train import equivariance_errors, eq_step_loss


def test_scales_follow_the_papers_rule():
    # the paper's {8/32, ..., 31/32} is m / 32 for m = 8..31 on its 32-wide latent
    assert [m / 32 for m in scales(32)] == [s / 32 for s in range(8, 32)]
    assert scales(8) == [2, 3, 4, 5, 6, 7]


def test_transform_gives_consistent_latent_and_image_sizes():
    tau = Transform(5, 1)
    z, x = torch.randn(2, 4, 8, 8), torch.rand(2, 1, 32, 32)
    assert tau(z).shape == (2, 4, 5, 5) and tau(x).shape == (2, 1, 20, 20)
    expected = torch.rot90(F.interpolate(x, size=(20, 20), mode="bilinear", align_corners=False), 1, dims=(-1, -2))
    torch.testing.assert_close(tau(x), expected)


def test_eq_branch_applies_one_transform_to_latent_and_image(monkeypatch):
    seen = []
    original = Transform.__call__

    def spy(self, t):
        seen.append((self, tuple(t.shape)))
        return original(self, t)

    monkeypatch.setattr(Transform, "__call__", spy)
    vae = VAE(AEConfig(channels=4))
    gen = torch.Generator().manual_seed(0)
    eq_step_loss(vae, torch.rand(3, 1, 32, 32), gen, AEConfig(channels=4), TrainConfig(p_prior=1.0))
    (tau_z, shape_z), (tau_x, shape_x) = seen
    assert tau_z is tau_x  # the same s and k for both
    assert shape_z == (3, 4, 8, 8) and shape_x == (3, 1, 32, 32)
    assert tau_z.k in (1, 2, 3) and tau_z.m in scales(8)


def test_symmetric_toy_decoder_is_exactly_rotation_equivariant_and_a_skewed_one_is_not():
    sym = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]) / 16  # invariant under rot90
    skew = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])

    def decoder(kernel):
        def decode(z):
            up = F.interpolate(z[:, :1], scale_factor=4, mode="nearest")
            return F.conv2d(up, kernel[None, None], padding=1)
        return decode

    z = torch.randn(6, 4, 8, 8)
    for kernel, equivariant in ((sym, True), (skew, False)):
        decode = decoder(kernel)
        x = decode(z)  # the images this decoder reconstructs perfectly
        for k in (1, 2, 3):
            same = torch.allclose(decode(torch.rot90(z, k, dims=(-1, -2))), torch.rot90(x, k, dims=(-1, -2)), atol=1e-6)
            assert same == equivariant
        err = equivariance_errors(decode, z.numpy(), x.numpy(), kinds=("rotation",))["rotation"]
        assert (err < 1e-12) == equivariant


def test_numpy_and_torch_rot90_turn_the_same_way():
    # the producer rotates images with numpy and latents with torch; both must agree
    a = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    for k in (1, 2, 3):
        np.testing.assert_array_equal(np.rot90(a, k, axes=(-1, -2)),
                                      torch.rot90(torch.from_numpy(a), k, dims=(-1, -2)).numpy())


def test_shapes_are_reproducible_in_range_and_rotation_invariant_in_distribution():
    a, b = make_images(64, 32, 2, seed=3), make_images(64, 32, 2, seed=3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, make_images(64, 32, 2, seed=4))
    assert a.shape == (64, 1, 32, 32) and a.dtype == np.float32 and 0 <= a.min() and a.max() <= 1
    big = make_images(2000, 32, 2, seed=0)
    # mass in the left and right halves agree, as they must under 90-degree rotations of the layout
    left, right = big[..., :16].mean(), big[..., 16:].mean()
    assert abs(left - right) / (left + right) < 0.03


def test_train_and_test_splits_differ():
    d = load_splits(ShapesConfig(n_train=16, n_test=16))
    assert not np.array_equal(d["train"], d["test"])


def test_vae_decodes_rescaled_latents_to_matching_image_sizes():
    vae = VAE(AEConfig(channels=4)).eval()
    z = vae.encode(torch.rand(2, 1, 32, 32))[0]
    assert z.shape == (2, 4, 8, 8)
    for m in scales(8):
        assert vae.decode(Transform(m, 2)(z)).shape == (2, 1, 4 * m, 4 * m)


def test_bad_settings_are_user_errors():
    with pytest.raises(EdgesmithError, match="size"):
        ShapesConfig(size=30)
    with pytest.raises(EdgesmithError, match="p_prior"):
        TrainConfig(p_prior=1.5)
    with pytest.raises(EdgesmithError, match="transform"):
        Transform(9, 1)
    with pytest.raises(EdgesmithError, match="no option"):
        AEConfig.from_dict({"chanels": 3})
    assert TrainConfig.from_dict(TrainConfig(batch=8).to_dict()) == TrainConfig(batch=8)


def test_sample_transform_covers_all_scales_and_turns():
    gen = torch.Generator().manual_seed(0)
    seen = {(t.m, t.k) for t in (sample_transform(gen) for _ in range(400))}
    assert seen == {(m, k) for m in scales(8) for k in (1, 2, 3)}
    assert eqtrain.KINDS == ("rotation", "scale", "scale+rotation")
