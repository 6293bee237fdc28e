"""Privacy accounting, noise calibration, noise telescoping and the federated schedule (no processes)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.dpfl import privacy
from edgesmith.models.papers.dpfl.config import DPFLConfig
from edgesmith.models.papers.dpfl.fl import Client, participation_schedule, run_rounds
from edgesmith.models.papers.dpfl.worker import calibration, data_of


def test_zcdp_to_eps_known_value_and_inverse():
    # Bun & Steinke: rho-zCDP gives (rho + 2 sqrt(rho ln(1/delta)), delta)-DP
    assert privacy.zcdp_to_eps(0.5, 1e-5) == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e5)))
    assert privacy.zcdp_to_eps(0.5, 1e-5) == pytest.approx(5.2985, abs=1e-4)
    rho = privacy.eps_to_zcdp(1.0, 1e-5)
    assert privacy.zcdp_to_eps(rho, 1e-5) == pytest.approx(1.0)


@pytest.mark.parametrize("method,schedule", [("fresh", "growing"), ("cancel", "growing"), ("cancel", "constant")])
def test_calibrated_noise_spends_exactly_the_target_epsilon(method, schedule):
    cal = calibration(DPFLConfig(method=method, schedule=schedule, epsilon=2.0))
    assert cal["epsilon_spent"] == pytest.approx(2.0)
    assert cal["sensitivity"] == pytest.approx(2 * 1.5 / 5)


def test_cancellation_needs_more_noise_per_message_than_fresh_noise():
    fresh, cancel = calibration(DPFLConfig(method="fresh")), calibration(DPFLConfig(method="cancel"))
    k = DPFLConfig().cycles
    assert cancel["sigma"] == pytest.approx(fresh["sigma"] * math.sqrt(privacy.harmonic(k)))


def _client(method, seed=0):
    cfg = DPFLConfig(clients=4, per_client=20, m=2, batch=2, method=method, seed=seed)
    x, y = data_of(cfg).client(0)
    return Client(0, x, y, cfg, sigma=0.7)


def test_cancelled_noises_telescope_to_the_last_noise():
    c = _client("cancel")
    total = sum(c.noise() for _ in range(6))
    assert torch.allclose(total, c.last_noise, atol=1e-12)
    assert float(c.last_noise.norm()) > 0.5  # noise was drawn: the identity is not 0 == 0
    fresh = _client("fresh")
    sent = [fresh.noise() for _ in range(6)]
    assert float(sum(sent).norm()) > 2 * float(sent[-1].norm())  # without cancellation the noises pile up


def test_clipped_signal_norm_is_at_most_the_clip():
    c = _client("nonprivate")
    x_t = torch.full((33,), 3.0, dtype=torch.float64)
    s = c.signal(x_t, -x_t, alpha_t=50.0, alpha_prev=49.0)
    assert float(s.norm()) <= c.cfg.clip + 1e-12


def test_every_client_participates_once_per_cycle():
    cfg = DPFLConfig(clients=8, per_client=10, m=4, batch=2)
    rounds = participation_schedule(cfg)
    assert len(rounds) == cfg.rounds == 10
    counts = np.bincount(np.concatenate(rounds), minlength=8)
    assert (counts == cfg.cycles).all()


def test_in_process_run_is_reproducible_for_a_seed():
    cfg = DPFLConfig(clients=4, per_client=20, m=2, batch=2, method="cancel")
    data = data_of(cfg)

    def once(seed):
        c = DPFLConfig(**{**cfg.to_dict(), "seed": seed})
        clients = {i: Client(i, *data.client(i), c, 1.0) for i in range(c.clients)}
        return run_rounds(c, clients, lambda t: t)

    assert torch.equal(once(0), once(0))
    assert not torch.equal(once(0), once(1))


@pytest.mark.parametrize("bad", [dict(m=7), dict(m=50), dict(batch=500), dict(epsilon=0.0), dict(delta=1.0),
                                 dict(method="local"), dict(schedule="decaying")])
def test_bad_config_is_a_user_error(bad):
    with pytest.raises(EdgesmithError):
        DPFLConfig(**bad)
