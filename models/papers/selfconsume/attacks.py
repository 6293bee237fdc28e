"""Label-flip attacks on the preference pairs: the attacker flips exactly B = round(budget * pairs) labels.

- ``random``: B pairs chosen uniformly.
- ``gap``: the B pairs with the largest true-reward gap |r(x) - r(y)| (the most confident ones).
- ``influence``: the authors' gradient attack in first-order form. Fit the BT model on the clean
  labels; with the head weights v on features h, flipping pair i moves the head by
  dv_i = -H^{-1} (1 - 2 o_i) (h(x_i) - h(y_i)) / N (an influence function; H is the BT loss Hessian
  in v, damped). Each flip is scored by grad A . dv_i for the attacker objective
  A(v) = -alpha Cov(e^{r_v}, e^{r}) + (1 - alpha) mean (r_v - r_clean)^2 over the round's samples
  (alpha = 0.8, as in the authors' default); the top-B are flipped. The distance term has zero
  gradient at v = v_clean, so to first order only the covariance term ranks flips. The authors
  iterate this with retraining and also search with NSGA-II; neither is done here.
"""
from __future__ import annotations

import numpy as np
import torch

from edgesmith.common import EdgesmithError

ATTACKS = ("none", "random", "gap", "influence")


def n_flips(n_pairs: int, budget: float) -> int:
    if not 0 <= budget <= 1:
        raise EdgesmithError(f"the attack budget must be a fraction in [0, 1], got {budget}.", "use e.g. 0.2.")
    return int(round(budget * n_pairs))


def choose_flips(kind: str, x: np.ndarray, pairs: np.ndarray, o: np.ndarray, budget: float,
                 rng: np.random.Generator, clean_model=None, alpha: float = 0.8) -> np.ndarray:
    """Indices of the pairs whose labels the attacker flips (exactly ``n_flips`` of them)."""
    from edgesmith.models.papers.selfconsume.world import true_reward

    b = n_flips(len(pairs), budget)
    if kind == "none" or b == 0:
        return np.zeros(0, dtype=np.int64)
    if kind == "random":
        return np.sort(rng.choice(len(pairs), size=b, replace=False))
    if kind == "gap":
        r = true_reward(x)
        gap = np.abs(r[pairs[:, 0]] - r[pairs[:, 1]])
        return np.sort(np.argsort(-gap, kind="stable")[:b])
    if kind == "influence":
        if clean_model is None:
            raise EdgesmithError("the influence attack needs the reward model fitted on clean labels.",
                                 "pass clean_model=...")
        scores = influence_scores(clean_model, x, pairs, o, alpha)
        return np.sort(np.argsort(-scores, kind="stable")[:b])
    raise EdgesmithError(f"unknown attack {kind!r}.", f"use one of: {', '.join(ATTACKS)}.")


def flip(o: np.ndarray, idx: np.ndarray) -> np.ndarray:
    o = np.array(o, dtype=np.float64, copy=True)
    o[idx] = 1 - o[idx]
    return o


def influence_scores(model, x: np.ndarray, pairs: np.ndarray, o: np.ndarray, alpha: float = 0.8,
                     damping: float = 1e-3) -> np.ndarray:
    """First-order gain of the attacker objective from flipping each pair (higher = more harmful)."""
    from edgesmith.models.papers.selfconsume.world import true_reward

    with torch.no_grad():
        h = model.features(torch.tensor(x, dtype=torch.float32)).double().numpy()
        head = model.net[-1]
        v = head.weight.detach().double().numpy()[0]
        b0 = float(head.bias.detach())
    dh = h[pairs[:, 0]] - h[pairs[:, 1]]
    n = len(pairs)
    d = dh @ v
    s = 1 / (1 + np.exp(-d))
    hess = (dh * (s * (1 - s))[:, None]).T @ dh / n + damping * np.eye(len(v))
    dv = -np.linalg.solve(hess, (dh * (1 - 2 * np.asarray(o))[:, None]).T / n).T  # (pairs, features)
    r_hat = h @ v + b0
    e_hat = np.exp(r_hat - r_hat.max())  # a constant factor: rescales A's gradient, not the ranking
    e_true = np.exp(true_reward(x))
    grad_cov = (e_hat * (e_true - e_true.mean())) @ h / len(x)
    return dv @ (-alpha * grad_cov)
