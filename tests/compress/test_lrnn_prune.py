"""IMP for the S5 denoiser: cubic schedule, ERK distribution, masks that reach the target and stay."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.compress.lrnn.prune import ImpConfig, Pruner, cubic_schedule, layer_sparsities, prune_finetune
from edgesmith.common import EdgesmithError
from edgesmith.models.lrnn.data import DataConfig, load_splits
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser
from edgesmith.models.lrnn.train import TrainConfig


def test_cubic_schedule_starts_at_zero_and_ends_at_target():
    assert cubic_schedule(0, 100, 0.9, 0.05, 0.9) == 0.0
    assert cubic_schedule(90, 100, 0.9, 0.05, 0.9) == pytest.approx(0.9)
    vals = [cubic_schedule(t, 100, 0.9, 0.05, 0.9) for t in range(101)]
    assert all(b >= a for a, b in zip(vals, vals[1:]))
    assert vals[30] > 0.9 * 30 / 100  # cubic: prunes fast early, slowly late


def test_erk_hits_the_overall_target_and_keeps_small_layers_denser():
    shapes = [(64, 257), (32, 64), (64, 64), (257, 64)]
    s = layer_sparsities(shapes, 0.9, "erk")
    numel = np.array([a * b for a, b in shapes])
    assert np.sum(numel * (1 - np.array(s))) == pytest.approx(0.1 * numel.sum(), rel=1e-6)
    assert s[1] < s[0]
    assert layer_sparsities(shapes, 0.9, "uniform") == [0.9] * 4


def test_pruner_prunes_complex_weights_jointly():
    m = S5Denoiser(S5Config(width=0.25, n_layers=1))
    p = Pruner(m)
    p.update(0.9)
    assert p.sparsity() == pytest.approx(0.9, abs=0.01)
    ssm = m.blocks[0].ssm
    np.testing.assert_array_equal((ssm.B_re == 0).numpy(), (ssm.B_im == 0).numpy())
    _, b_bar = ssm.discrete()
    assert torch.equal(b_bar == 0, torch.complex(ssm.B_re, ssm.B_im) == 0)


def test_prune_finetune_reaches_90_percent_and_masks_hold():
    splits = load_splits(DataConfig.tiny())
    m = S5Denoiser(S5Config(width=0.25, n_layers=1))
    pruner, hist = prune_finetune(m, splits["train"], ImpConfig(sparsity=0.9, every=1),
                                  TrainConfig(epochs=1, batch=2))
    assert pruner.sparsity() == pytest.approx(0.9, abs=0.01)
    nnz = sum(int(torch.count_nonzero(p)) for _, g in m.prunable() for p in g)
    total = sum(p.numel() for _, g in m.prunable() for p in g)
    assert nnz / total == pytest.approx(0.1, abs=0.01)
    assert m.effective_macs_per_step() < 0.2 * m.dense_macs_per_step()


def test_bad_imp_config_is_a_readable_error():
    with pytest.raises(EdgesmithError, match="sparsity"):
        ImpConfig(sparsity=1.0)
