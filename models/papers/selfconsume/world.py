"""The 2-D world: a ring of Gaussians, the users' true reward, and the generative model (a GMM by EM).

Real data: 8 Gaussians (std 0.25) on a circle of radius 2, like the authors' ``gaussian8`` toy set.
True reward r(x) = -||x - c|| with c the first centre (2, 0) (the brief's form; the authors' code
uses -10 max(||x - c|| - 3, 0), which is flat near c). The generative model is a Gaussian mixture
(8 components, full covariances) fitted by EM with scikit-learn; our choice instead of the
authors' DDPM: it is what fits in seconds per round on one core, and retraining warm-starts from
the previous round's parameters, as their DDPM is fine-tuned from its previous checkpoint.
Sampling uses our own generator so a seed fixes every draw.
"""
from __future__ import annotations

import warnings

import numpy as np

N_MODES = 8
RADIUS = 2.0
STD = 0.25
TARGET = np.array([RADIUS, 0.0])


def centres() -> np.ndarray:
    a = 2 * np.pi * np.arange(N_MODES) / N_MODES
    return RADIUS * np.stack([np.cos(a), np.sin(a)], axis=1)


def real_data(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of the real distribution (uniform over the 8 modes)."""
    k = rng.integers(0, N_MODES, n)
    return centres()[k] + STD * rng.standard_normal((n, 2))


def true_reward(x: np.ndarray) -> np.ndarray:
    """r(x) = -||x - c||: the users' preference, higher near the target mode."""
    return -np.linalg.norm(np.asarray(x, dtype=np.float64) - TARGET, axis=-1)


class MixtureGenerator:
    """A GMM fitted by EM; ``fit`` warm-starts from the current parameters when there are any."""

    def __init__(self, n_components: int = N_MODES, seed: int = 0, max_iter: int = 30, reg_covar: float = 1e-3):
        self.n_components, self.seed, self.max_iter, self.reg_covar = n_components, seed, max_iter, reg_covar
        self.params_ = None

    def fit(self, x: np.ndarray) -> "MixtureGenerator":
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import GaussianMixture

        kw = {}
        if self.params_ is not None:
            w, mu, cov = self.params_
            kw = {"weights_init": w, "means_init": mu, "precisions_init": np.linalg.inv(cov)}
        gm = GaussianMixture(self.n_components, covariance_type="full", max_iter=self.max_iter,
                             reg_covar=self.reg_covar, random_state=self.seed, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gm.fit(x)
        self.params_ = (gm.weights_ / gm.weights_.sum(), gm.means_, gm.covariances_)
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        w, mu, cov = self.params_
        k = rng.choice(len(w), size=n, p=w)
        chol = np.linalg.cholesky(cov)
        return mu[k] + np.einsum("nij,nj->ni", chol[k], rng.standard_normal((n, 2)))
