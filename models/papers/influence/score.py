"""A training-free data-influence score for the class-dependent noise model: the project's reading.

The paper says its test-loss bound yields a training-free metric of data influence but its formula
could not be read from public sources, so this is OUR derivation from the model, not the paper's
formula. In the two-layer CNN analyses (Cao et al. 2022, Kou et al. 2023) gradient descent writes a
training sample's noise into the filters of its own class: ``w_{y_i,r} ~ ... + rho_i xi_i / ||xi_i||^2``.
For a fresh test sample of class ``c`` with noise ``xi ~ N(0, Sigma_c)`` that term contributes
``rho_i <xi_i, xi> / ||xi_i||^2`` to the class-``y_i`` filters, with second moment proportional to
``xi_i^T Sigma_c xi_i / ||xi_i||^2`` (times ``rho_i^2 / ||xi_i||^2``). It raises the right class's
output when ``c = y_i`` (an implicit feature) and the wrong class's when ``c != y_i``. The score is
the difference, in units of ``2 sigma^2``:

    s_i = (xi_i^T Sigma_{y_i} xi_i - xi_i^T Sigma_{-y_i} xi_i) / (2 sigma^2 ||xi_i||^2)

It is 0 for every sample when the covariances are equal (memorised noise carries no class
information, so atypical samples are classified at chance) and close to the class dependence ``rho``
when they differ; it needs the data and the covariances only, no training. ``compress.calibration_select``
generalises it to any model by estimating class subspaces from features.
"""
from __future__ import annotations

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.influence.config import NoiseDataConfig
from edgesmith.models.papers.influence.data import NoiseSplit, covariances


def oracle_influence(split: NoiseSplit, cfg: NoiseDataConfig) -> np.ndarray:
    """The score ``s_i`` of every sample of ``split`` from the true covariances of ``cfg`` (see module doc)."""
    if split.x.shape[-1] != cfg.d:
        raise EdgesmithError(f"the samples have d = {split.x.shape[-1]} but the config says d = {cfg.d}.",
                             "score samples drawn from the same NoiseDataConfig.")
    cov = covariances(cfg)
    xi = split.xi.astype(np.float64)
    own = np.einsum("nd,nd->n", xi @ cov[1], xi)
    other = np.einsum("nd,nd->n", xi @ cov[-1], xi)
    own, other = np.where(split.y > 0, own, other), np.where(split.y > 0, other, own)
    energy = np.maximum(np.einsum("nd,nd->n", xi, xi), 1e-30)
    return (own - other) / (2 * cfg.sigma ** 2 * energy)
