"""TSV's building blocks: Sinkhorn marginals, exact steering, the prototype head, selection, training."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model
from edgesmith.models.papers.tsv.method import (SteeredRWKV, TSVConfig, TSVDetector, class_probs, ema_update, select_confident,
                               sinkhorn, train_tsv)


def small_rwkv(version=7, seed=0):
    torch.manual_seed(seed)
    m = build_model(RWKVConfig(version=version, n_layer=3, n_embd=32, head_size=16)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


@pytest.mark.parametrize("prior", [(0.5, 0.5), (0.2, 0.8), (0.1, 0.3, 0.6)])
def test_sinkhorn_matches_sample_and_class_marginals(prior):
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(200, len(prior), generator=g)
    q = sinkhorn(scores, torch.tensor(prior), epsilon=0.05, n_iters=300)
    np.testing.assert_allclose(q.sum(1).numpy(), 1.0, atol=1e-5)  # every sample fully assigned
    np.testing.assert_allclose(q.sum(0).numpy(), 200 * np.array(prior), rtol=1e-3)  # class shares = prior
    assert (q >= 0).all()


def test_sinkhorn_follows_the_scores_when_they_agree_with_the_prior():
    scores = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.2, 0.8]])
    q = sinkhorn(scores, torch.tensor([0.5, 0.5]), epsilon=0.05)
    assert q.argmax(1).tolist() == [0, 0, 1, 1]


def test_sinkhorn_rejects_a_zero_prior_or_mismatched_shapes():
    with pytest.raises(EdgesmithError):
        sinkhorn(torch.zeros(4, 2), torch.tensor([1.0, 0.0]))
    with pytest.raises(EdgesmithError):
        sinkhorn(torch.zeros(4, 3), torch.tensor([0.5, 0.5]))


@pytest.mark.parametrize("version", [6, 7])
def test_steering_adds_exactly_lambda_v_after_the_chosen_layer_and_nothing_before(version):
    model = small_rwkv(version)
    s = SteeredRWKV(model, layer=1, lam=5.0)
    with torch.no_grad():
        s.v.copy_(torch.randn(32))
    tokens = torch.randint(0, 256, (3, 9), generator=torch.Generator().manual_seed(1))
    plain, steered = s.residuals(tokens, steer=False), s.residuals(tokens, steer=True)
    torch.testing.assert_close(steered[0], plain[0], rtol=0, atol=0)  # before the layer: untouched
    diff = steered[1] - plain[1]
    torch.testing.assert_close(diff, (5.0 * s.v).expand_as(diff), rtol=0, atol=1e-5)  # every position
    assert not torch.allclose(steered[2], plain[2] + 5.0 * s.v)  # the next block transforms it
    # the plain residual stream is the model's own: its head reproduces the model's logits
    torch.testing.assert_close(model.head(model.ln_out(plain[-1])), model(tokens)[0], rtol=1e-5, atol=1e-5)


def test_steering_layer_must_have_a_block_after_it():
    with pytest.raises(EdgesmithError):
        SteeredRWKV(small_rwkv(), layer=2, lam=5.0)


def test_prototype_head_is_a_softmax_of_scaled_cosines_and_ema_moves_towards_the_class_mean():
    r = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), dim=-1)
    mu = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = class_probs(r, mu, kappa=10.0)
    np.testing.assert_allclose(p[0].numpy(), torch.softmax(torch.tensor([10.0, 0.0]), 0).numpy(), rtol=1e-6)
    new = ema_update(mu, torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]]), decay=0.5)
    np.testing.assert_allclose(new[0].numpy(), np.array([1, 1]) / np.sqrt(2), rtol=1e-6)
    np.testing.assert_allclose(new[1].numpy(), [0.0, 1.0])  # a class absent from the batch keeps its prototype


def test_selection_takes_the_most_confident_per_class_in_prior_proportion():
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.45, 0.55], [0.99, 0.01], [0.3, 0.7]])
    q = torch.nn.functional.one_hot(probs.argmax(1), 2).float()
    idx = select_confident(q, probs, k=4, prior=torch.tensor([0.5, 0.5]))
    assert sorted(idx.tolist()) == [0, 2, 4, 5]


def test_training_moves_only_v_is_reproducible_and_separates_a_learnable_split():
    model = small_rwkv()
    g = np.random.default_rng(0)
    # two classes that differ in their last token: a steering vector can make that separable
    x = g.integers(97, 123, (48, 10))
    y = np.arange(48) % 2
    x[:, -1] = np.where(y == 1, ord("."), ord("!"))
    cfg = TSVConfig(layer=0, init_epochs=5, aug_epochs=2, n_selected=8, batch=16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a = train_tsv(model, x[:16], y[:16], x[16:], cfg, seed=3)
    b = train_tsv(model, x[:16], y[:16], x[16:], cfg, seed=3)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # caller's model untouched
    torch.testing.assert_close(a.steered.v, b.steered.v, rtol=0, atol=0)
    assert a.history["n_selected"] == 8 and len(a.history["stage2_loss"]) == 2 * 2
    det = TSVDetector(a.steered, a.prototypes, cfg.kappa).eval()
    with torch.no_grad():
        p = det(torch.from_numpy(x[16:]).float())[:, 0].numpy()
    assert p.shape == (32,) and ((p > 0.5) == (y[16:] == 1)).mean() > 0.9
    with pytest.raises(EdgesmithError):
        train_tsv(model, x[:4], np.zeros(4), None, cfg)
