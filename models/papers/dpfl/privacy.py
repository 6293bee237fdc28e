"""Privacy accounting in zero-concentrated DP (Bun & Steinke 2016) and the noise calibrations used here.

Unit of privacy: one training sample of one client (neighbouring data sets differ in one sample).
Each client's message at a participation is the mean over a minibatch of b fresh samples of the
per-sample vector s_z = alpha_t grad(x_t; z) - alpha_{t-1} grad(x_{t-1}; z), each clipped to norm C,
so replacing one sample moves the message by at most Delta = 2 C / b (the per-client L2 sensitivity).
Every sample is used at exactly one participation (one pass over each client's data).

* Fresh noise (baseline): the message is s + y with independent y ~ N(0, sigma^2 I). A sample
  touches one message, so the run is rho-zCDP with rho = Delta^2 / (2 sigma^2) (the Gaussian
  mechanism; later messages depend on it only through the public iterates: adaptive composition).
* Noise cancellation: the k-th message of a client is s_k + y_k - y_{k-1}. The server can form the
  prefix sums P_K = S_K + y_K (S_K = s_1 + ... + s_K), an invertible map of the messages, and the
  y_K are independent; a sample used at participation k shifts every P_K with K >= k by <= Delta, so
  rho = (Delta^2 / 2) sum_{K >= k} 1 / sigma_K^2 (worst case k = 1). With sigma_K^2 = sigma^2 K
  (noise growing with the participation count, schedule ``growing``) this is
  (Delta^2 / (2 sigma^2)) H_Kmax (H the harmonic number); with ``constant`` sigma it is
  Kmax Delta^2 / (2 sigma^2).

Conversion: rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP for every delta in (0, 1).
"""
from __future__ import annotations

import math

from edgesmith.common import EdgesmithError

SCHEDULES = ("growing", "constant")


def _check(eps: float, delta: float) -> None:
    if not eps > 0:
        raise EdgesmithError(f"epsilon {eps} is not positive.", "use a privacy budget epsilon > 0 (e.g. 1.0).")
    if not 0 < delta < 1:
        raise EdgesmithError(f"delta {delta} is outside (0, 1).", "use a small delta such as 1e-5.")


def zcdp_to_eps(rho: float, delta: float) -> float:
    """epsilon of (epsilon, delta)-DP implied by rho-zCDP (Bun & Steinke 2016, Prop. 1.3)."""
    _check(1.0, delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def eps_to_zcdp(eps: float, delta: float) -> float:
    """The largest rho whose conversion gives at most ``eps`` (inverse of ``zcdp_to_eps``)."""
    _check(eps, delta)
    l = math.log(1.0 / delta)
    return (math.sqrt(l + eps) - math.sqrt(l)) ** 2


def harmonic(k: int) -> float:
    return sum(1.0 / i for i in range(1, k + 1))


def sensitivity(clip: float, batch: int) -> float:
    """L2 sensitivity of a client's message to replacing one sample: 2 C / b."""
    return 2.0 * clip / batch


def sigma_fresh(delta_l2: float, rho: float) -> float:
    return delta_l2 / math.sqrt(2.0 * rho)


def sigma_cancel(delta_l2: float, rho: float, k_max: int, schedule: str = "growing") -> float:
    """Base sigma of noise cancellation: the k-th noise has std sigma * sqrt(k) (growing) or sigma (constant)."""
    if schedule not in SCHEDULES:
        raise EdgesmithError(f"unknown noise schedule {schedule!r}.", f"use one of: {', '.join(SCHEDULES)}.")
    factor = harmonic(k_max) if schedule == "growing" else float(k_max)
    return delta_l2 * math.sqrt(factor / (2.0 * rho))


def noise_std(sigma: float, k: int, schedule: str) -> float:
    """Std of the noise a client draws at its k-th participation (k = 1, 2, ...)."""
    return sigma * math.sqrt(k) if schedule == "growing" else sigma


def rho_cancel(delta_l2: float, stds: list[float]) -> float:
    """zCDP of noise cancellation for the worst-placed sample, given the per-participation stds."""
    return 0.5 * delta_l2 ** 2 * sum(1.0 / s ** 2 for s in stds)
