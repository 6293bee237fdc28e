"""OOD scores of a supervised classifier and the AUROC that judges them.

Convention everywhere: a score is *higher for in-distribution* inputs, and AUROC is the probability
that a random ID input scores above a random OOD input (ties count one half). 0.5 is chance; below
0.5 the score ranks OOD inputs as *more* in-distribution than ID ones, the pathology the paper
(arXiv 2507.01831) describes.

- ``msp``: maximum softmax probability (uncertainty-based).
- ``energy``: logsumexp of the logits, i.e. minus the free energy (uncertainty-based).
- ``mahalanobis``: ``-min_c (e - mu_c)^T S^-1 (e - mu_c)`` with class means ``mu_c`` and one shared
  covariance ``S`` fitted on training features (feature-based).
- ``oracle``: a logistic-regression probe trained on ID *and* OOD features (half of each, scored
  on the other half): what any linear score on these features could reach at best.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgesmith.common import EdgesmithError

SCORES = ("msp", "energy", "mahalanobis")


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + 0.5 P(tie), by ranks (Mann-Whitney U)."""
    pos = np.asarray(pos, dtype=np.float64).ravel()
    neg = np.asarray(neg, dtype=np.float64).ravel()
    if pos.size == 0 or neg.size == 0:
        raise EdgesmithError("AUROC needs at least one positive and one negative score.",
                             "pass non-empty score arrays for both groups.")
    if not (np.all(np.isfinite(pos)) and np.all(np.isfinite(neg))):
        raise EdgesmithError("AUROC got NaN or infinite scores.", "check the model outputs the scores come from.")
    both = np.concatenate([pos, neg])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(both.size, dtype=np.float64)
    sorted_vals = both[order]
    # average ranks over ties so equal scores count one half
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], both.size]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = 0.5 * (s + e - 1) + 1.0
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (pos.size * neg.size))


def _check_logits(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 2 or logits.shape[1] < 2:
        raise EdgesmithError(f"logits have shape {logits.shape}; expected (samples, classes >= 2).",
                             "pass the classifier's raw logits, one row per sample.")
    return logits


def energy(logits: np.ndarray) -> np.ndarray:
    """logsumexp over classes (higher = more in-distribution)."""
    z = _check_logits(logits)
    m = z.max(axis=1, keepdims=True)
    return (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]


def msp(logits: np.ndarray) -> np.ndarray:
    """Maximum softmax probability."""
    z = _check_logits(logits)
    return np.exp(z.max(axis=1) - energy(z))


@dataclass
class MahalanobisFit:
    """Class means (C, F) and the inverse of the shared (pooled within-class) covariance (F, F)."""

    means: np.ndarray
    precision: np.ndarray

    def score(self, features: np.ndarray) -> np.ndarray:
        e = np.asarray(features, dtype=np.float64)
        if e.ndim != 2 or e.shape[1] != self.means.shape[1]:
            raise EdgesmithError(f"features have shape {e.shape}; the fit expects (samples, {self.means.shape[1]}).",
                                 "score features from the same layer the fit used.")
        d2 = np.stack([np.einsum("ij,jk,ik->i", e - m, self.precision, e - m) for m in self.means], axis=1)
        return -d2.min(axis=1)


def fit_mahalanobis(features: np.ndarray, labels: np.ndarray, ridge: float = 1e-6) -> MahalanobisFit:
    """Means per class present in ``labels`` and the pooled covariance; ``ridge`` (relative to the
    mean variance) keeps the inverse finite when features are rank-deficient (dead ReLUs)."""
    e = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels).ravel()
    if e.ndim != 2 or len(e) != len(y) or len(e) < 2:
        raise EdgesmithError(f"Mahalanobis fit got features {e.shape} and labels {y.shape}.",
                             "pass one label per feature row and at least two rows.")
    classes = np.unique(y)
    means = np.stack([e[y == c].mean(axis=0) for c in classes])
    centred = e - means[np.searchsorted(classes, y)]
    cov = centred.T @ centred / len(e)
    scale = float(np.trace(cov)) / cov.shape[0] or 1.0
    precision = np.linalg.pinv(cov + ridge * scale * np.eye(cov.shape[0]), hermitian=True)
    return MahalanobisFit(means, precision)


def oracle_probe_auroc(id_features: np.ndarray, ood_features: np.ndarray, seed: int = 0) -> float:
    """AUROC of a logistic-regression probe trained on half of the ID and OOD features, scored on the rest.

    It sees OOD data, which no real detector does: an upper bound for linear scores on these features.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    a, b = np.asarray(id_features, dtype=np.float64), np.asarray(ood_features, dtype=np.float64)
    if len(a) < 4 or len(b) < 4:
        raise EdgesmithError("the oracle probe needs at least 4 ID and 4 OOD samples.", "pass more samples.")
    rng = np.random.default_rng(seed)
    ia, ib = rng.permutation(len(a)), rng.permutation(len(b))
    ha, hb = len(a) // 2, len(b) // 2
    x_fit = np.concatenate([a[ia[:ha]], b[ib[:hb]]])
    y_fit = np.r_[np.ones(ha), np.zeros(hb)]
    scaler = StandardScaler().fit(x_fit)
    clf = LogisticRegression(max_iter=2000, C=1.0).fit(scaler.transform(x_fit), y_fit)
    s_id = clf.decision_function(scaler.transform(a[ia[ha:]]))
    s_ood = clf.decision_function(scaler.transform(b[ib[hb:]]))
    return auroc(s_id, s_ood)


def all_scores(logits: np.ndarray, features: np.ndarray, fit: MahalanobisFit) -> dict[str, np.ndarray]:
    """Every score of ``SCORES`` for one batch of outputs."""
    return {"msp": msp(logits), "energy": energy(logits), "mahalanobis": fit.score(features)}
