"""Config dataclasses of the ``noise-cnn`` producer: validated on construction, JSON round trip."""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import Config
from edgesmith.common.checks import is_int


class _Config(Config):
    """The shared config mixin plus this package's own field check."""

    def _positive(self, *names: str) -> None:
        for name in names:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                self._fail(name, f"is {v!r}", "use a positive number.")


@dataclass(frozen=True)
class NoiseDataConfig(_Config):
    """The two-patch feature-noise distribution with class-dependent noise covariance.

    Each sample is ``x = [y * mu, xi]`` (two patches of ``d`` values); an atypical sample (a fraction
    ``atypical`` of them) has ``mu = 0`` in its first patch. The noise is
    ``xi ~ N(0, Sigma_y)`` with ``Sigma_y = (1 - rho) sigma^2 I + rho 2 sigma^2 P_y P_y^T``, where
    ``P_+`` and ``P_-`` span two disjoint halves of a fixed random orthonormal basis and
    ``rho = class_dependence``: 0 gives equal covariances (the Kou et al. / Cao et al. model), 1
    disjoint noise subspaces. Both ends have the same expected noise energy ``sigma^2 d``.
    """

    d: int = 200
    n_train: int = 200
    n_test: int = 2000
    atypical: float = 0.5
    mu_norm: float = 5.0
    sigma: float = 1.0
    class_dependence: float = 1.0
    seed: int = 0

    def validate(self) -> None:
        for name in ("d", "n_train", "n_test"):
            v = getattr(self, name)
            if not is_int(v, 2):
                self._fail(name, f"is {v!r}", "use a whole number of at least 2.")
        if self.d % 2:
            self._fail("d", f"is {self.d}, an odd number",
                       "use an even d: the two classes take half the noise basis each.")
        if not 0.0 <= self.atypical <= 1.0:
            self._fail("atypical", f"is {self.atypical!r}", "use a fraction between 0 and 1.")
        if not 0.0 <= self.class_dependence <= 1.0:
            self._fail("class_dependence", f"is {self.class_dependence!r}",
                       "use 0 (equal covariances) to 1 (disjoint noise subspaces).")
        if self.mu_norm < 0:
            self._fail("mu_norm", f"is {self.mu_norm!r}", "use a norm of 0 or more.")
        self._positive("sigma")


@dataclass(frozen=True)
class CnnConfig(_Config):
    """Two-layer CNN ``F_j(x) = 1/m sum_r sum_p ReLU(<w_{j,r}, x_p>)^q``, ``f = F_+ - F_-``, trained by
    full-batch gradient descent on the logistic loss (second layer fixed at +-1/m)."""

    m: int = 20
    q: float = 2.0
    init_std: float = 0.01
    lr: float = 0.5
    steps: int = 500

    def validate(self) -> None:
        for name in ("m", "steps"):
            v = getattr(self, name)
            if not is_int(v, 1):
                self._fail(name, f"is {v!r}", "use a whole number of at least 1.")
        if not isinstance(self.q, (int, float)) or isinstance(self.q, bool) or self.q < 1:
            self._fail("q", f"is {self.q!r}", "use an exponent of at least 1 (1 is plain ReLU).")
        self._positive("init_std", "lr")
