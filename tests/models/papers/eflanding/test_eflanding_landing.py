"""The landing field's defining properties, block-wise landing, the PCA problem and config checks."""
from __future__ import annotations

import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.eflanding.config import EFLandingConfig
from edgesmith.models.papers.eflanding.landing import (blockwise_landing_field, feasibility, landing_field, normal_term,
                                      relative_gradient)
from edgesmith.models.papers.eflanding.pca import PCAProblem, objective, optimum
from edgesmith.models.papers.eflanding.worker import initial_point, landing_step


def _cov(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(n, n, generator=g, dtype=torch.float64)
    return b @ b.T / n


def test_field_vanishes_on_the_manifold_at_a_critical_point():
    a = _cov()
    x = torch.linalg.eigh(a).eigenvectors[:, -3:]  # top eigenvectors: orthonormal and critical for -tr(X^T A X)/2
    field = landing_field(x, -a @ x, lam=1.0)
    assert float(field.norm()) < 1e-12
    # a non-critical point of the manifold does not make it vanish
    y, _ = torch.linalg.qr(torch.randn(12, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    assert float(landing_field(y, -a @ y, 1.0).norm()) > 1e-3


def test_normal_term_step_decreases_distance_to_the_manifold():
    y, _ = torch.linalg.qr(torch.randn(12, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    x = 1.2 * y
    before = feasibility(x)
    after = feasibility(x - 0.1 * normal_term(x))
    assert before > 0.5 and after < before


def test_field_components_are_orthogonal():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(10, 4, generator=g, dtype=torch.float64)
    grad = torch.randn(10, 4, generator=g, dtype=torch.float64)
    assert abs(float((relative_gradient(x, grad) * normal_term(x)).sum())) < 1e-10


def test_blockwise_field_is_one_landing_term_per_block():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(9, 5, generator=g, dtype=torch.float64)
    grad = torch.randn(9, 5, generator=g, dtype=torch.float64)
    parts = blockwise_landing_field([x[:, :3], x[:, 3:]], [grad[:, :3], grad[:, 3:]], 0.7)
    assert torch.allclose(parts[0], landing_field(x[:, :3], grad[:, :3], 0.7))
    assert torch.allclose(parts[1], landing_field(x[:, 3:], grad[:, 3:], 0.7))
    cfg = EFLandingConfig(n=9, p=5, blocks=(3, 2), eta=0.1, lam=0.7)
    stepped = landing_step(x, cfg.eta * grad, cfg)
    assert torch.allclose(stepped, torch.cat([x[:, :3] - 0.1 * parts[0], x[:, 3:] - 0.1 * parts[1]], dim=1))


@pytest.fixture
def one_thread():
    # tiny matrices: thread start-up and contention cost far more than the arithmetic
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_uncompressed_landing_iterations_reach_the_pca_optimum_in_process(one_thread):
    cfg = EFLandingConfig(workers=2, samples_per_worker=300, iters=200, eta=0.5, compressor="identity", ef_mode="none")
    prob = PCAProblem(cfg.n, cfg.p, cfg.workers, cfg.samples_per_worker, cfg.seed)
    a = sum(prob.local_covariance(i) for i in range(cfg.workers)) / cfg.workers
    x = initial_point(cfg)
    for _ in range(cfg.iters):
        x = landing_step(x, cfg.eta * (-a @ x), cfg)
    assert objective(a, x) - optimum(a, cfg.p) < 1e-6
    assert feasibility(x) < 1e-6


def test_problem_data_are_reproducible_for_a_seed_and_differ_across_seeds():
    p0, p1 = PCAProblem(20, 3, 2, 50, 0), PCAProblem(20, 3, 2, 50, 1)
    assert (p0.samples(1, 10) == PCAProblem(20, 3, 2, 50, 0).samples(1, 10)).all()
    assert not (p0.samples(1, 10) == p1.samples(1, 10)).all()
    assert not (p0.samples(0, 10, "train") == p0.samples(0, 10, "test")).all()


@pytest.mark.parametrize("bad", [dict(p=60), dict(eta=0.0), dict(compressor="topk:2"), dict(ef_mode="x"),
                                 dict(message="hessian"), dict(blocks=(2, 2)), dict(iters=0)])
def test_bad_config_is_a_user_error(bad):
    with pytest.raises(EdgesmithError):
        EFLandingConfig(**bad)


def test_config_round_trips_through_json():
    cfg = EFLandingConfig(blocks=(3, 2), compressor="quant:4", ef_mode="ef14")
    assert EFLandingConfig.from_dict(__import__("json").loads(cfg.to_json())) == cfg
