"""The self-consuming retraining loop with (noisy, adversarial) preference curation.

Each round t: draw K samples from the generator; draw K random pairs labelled by the true reward;
the attacker flips B of the labels (``attack``); fit a Bradley-Terry reward model r_hat on the
(possibly flipped) pairs; curate M = K * keep samples by drawing without replacement with
    P_k = (1 - phi) softmax(r_hat)_k + phi softmax(r_adv)_k,   r_adv = -r_hat
(the paper's noisy-curation model with a fraction phi of adversarial curators, r_adv = -r; the
authors' code curates with Luce weights exp(r_hat), phi = 0) or keep the top M by r_hat
(``selection="topk"``); retrain the generator on the curated samples alone (``real_fraction=0``)
or mixed with real samples making up ``real_fraction`` of the set (the authors mix 80% generated,
i.e. 0.2). The figure of merit is E[r(x)] under the generator, estimated with fresh samples.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgesmith.common import Config, EdgesmithError
from edgesmith.models.papers.selfconsume.attacks import ATTACKS, choose_flips, flip
from edgesmith.models.papers.selfconsume.reward_model import RewardTrainConfig, make_pairs, score, train_reward_model
from edgesmith.models.papers.selfconsume.world import MixtureGenerator, real_data, true_reward


def softmax(r: np.ndarray) -> np.ndarray:
    e = np.exp(np.asarray(r, dtype=np.float64) - np.max(r))
    return e / e.sum()


def curation_probs(r_hat: np.ndarray, phi: float) -> np.ndarray:
    """(1 - phi) softmax(r_hat) + phi softmax(-r_hat): the selection distribution over one round's samples."""
    if not 0 <= phi <= 1:
        raise EdgesmithError(f"phi (the adversarial share) must lie in [0, 1], got {phi}.", "use e.g. 0.1 or 0.3.")
    return (1 - phi) * softmax(r_hat) + phi * softmax(-np.asarray(r_hat))


def curate(r_hat: np.ndarray, m: int, phi: float, selection: str, rng: np.random.Generator) -> np.ndarray:
    """Indices of the ``m`` curated samples."""
    if selection == "topk":
        if phi > 0:
            raise EdgesmithError("top-k curation has no adversarial share phi.", "use selection='sample' with phi > 0.")
        return np.argsort(-np.asarray(r_hat), kind="stable")[:m]
    if selection != "sample":
        raise EdgesmithError(f"unknown selection {selection!r}.", "use 'sample' or 'topk'.")
    return rng.choice(len(r_hat), size=m, replace=False, p=curation_probs(r_hat, phi))


@dataclass(frozen=True)
class LoopConfig(Config):
    rounds: int = 20
    k: int = 500  # samples generated per round (and preference pairs drawn)
    keep: float = 0.5  # curated fraction M / K
    phi: float = 0.0
    attack: str = "none"
    budget: float = 0.2
    real_fraction: float = 0.0
    selection: str = "sample"
    n_real: int = 2000
    n_eval: int = 2000
    reward_steps: int = 100

    def validate(self) -> None:
        if self.rounds < 1 or self.k < 10:
            self._fail("rounds/k", f"are {self.rounds}/{self.k}", "use at least 1 round and 10 samples per round.")
        if not 0 < self.keep <= 1:
            self._fail("keep", f"is {self.keep}", "keep a fraction in (0, 1] of each round's samples.")
        if not 0 <= self.phi <= 1:
            self._fail("phi", f"is {self.phi}", "use an adversarial share in [0, 1].")
        if self.attack not in ATTACKS:
            self._fail("attack", f"is {self.attack!r}", f"use one of: {', '.join(ATTACKS)}.")
        if not 0 <= self.budget <= 1:
            self._fail("budget", f"is {self.budget}", "use a flipped fraction in [0, 1].")
        if not 0 <= self.real_fraction < 1:
            self._fail("real_fraction", f"is {self.real_fraction}", "use a real-data share in [0, 1).")
        if self.selection not in ("sample", "topk"):
            self._fail("selection", f"is {self.selection!r}", "use 'sample' or 'topk'.")


def run_loop(cfg: LoopConfig, seed: int) -> dict:
    """Run the loop; returns E[true reward] per round (round 0 = the generator fitted on real data)."""
    rng = np.random.default_rng([seed, 8])
    eval_rng = np.random.default_rng([seed, 9])  # separate stream: evaluation does not shift training draws
    real = real_data(cfg.n_real, rng)
    gen = MixtureGenerator(seed=seed).fit(real)
    rcfg = RewardTrainConfig(steps=cfg.reward_steps)
    m = max(2, int(round(cfg.keep * cfg.k)))
    n_real_mix = int(round(m * cfg.real_fraction / (1 - cfg.real_fraction)))
    rewards = [float(true_reward(gen.sample(cfg.n_eval, eval_rng)).mean())]
    acc = []
    for t in range(cfg.rounds):
        x = gen.sample(cfg.k, rng)
        pairs, o = make_pairs(x, cfg.k, rng)
        clean = None
        if cfg.attack == "influence":
            clean = train_reward_model(x, pairs, o, rcfg, seed=seed * 1000 + t)
        idx = choose_flips(cfg.attack, x, pairs, o, cfg.budget, rng, clean_model=clean)
        model = train_reward_model(x, pairs, flip(o, idx), rcfg, seed=seed * 1000 + t)
        r_hat = score(model, x)
        r = true_reward(x)
        acc.append(float(np.mean(np.sign(r_hat[pairs[:, 1]] - r_hat[pairs[:, 0]])
                                 == np.sign(r[pairs[:, 1]] - r[pairs[:, 0]]))))
        data = x[curate(r_hat, m, cfg.phi, cfg.selection, rng)]
        if n_real_mix:
            data = np.concatenate([data, real[rng.choice(len(real), n_real_mix, replace=len(real) < n_real_mix)]])
        gen.fit(data)
        rewards.append(float(true_reward(gen.sample(cfg.n_eval, eval_rng)).mean()))
    return {"expected_reward": rewards, "reward_model_accuracy": acc}
