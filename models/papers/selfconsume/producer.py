"""The ``self-consuming`` producer: the Bradley-Terry reward model that curates the self-consuming loop.

What is deployed is the curator's reward model r_hat (MLP 2 -> 64 -> 64 -> 1): it scores every
generated sample each round, so it is the part that runs at scale. It is fitted, as in round 0 of
the loop, on random pairs of samples from the generator (a GMM fitted by EM on the real 8-Gaussian
data) labelled by the true reward, without attack. Input: a 2-D point; output: its reward.
Metric: pairwise accuracy against the true reward on held-out pairs of fresh generator samples.
``Evaluation.extra`` has the true E[r] of the samples the model curates (Luce sampling of half of
them with a fixed seed, and top-k): the quantity the loop feeds back into the generator.

Default (seconds): 2000 samples, 4000 pairs, 300 Adam steps. ``tiny=True``: 300 samples, 40 steps.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import Config, cache_dir, module_cached
from edgesmith.models.papers.selfconsume.loop import curate
from edgesmith.models.papers.selfconsume.reward_model import (RewardMLP, RewardTrainConfig, make_pairs, pairwise_accuracy,
                                             train_reward_model)
from edgesmith.models.papers.selfconsume.world import MixtureGenerator, real_data, true_reward


@dataclass(frozen=True)
class RewardProducerConfig(Config):
    n_samples: int = 2000
    n_pairs: int = 4000
    steps: int = 300
    n_test: int = 2000

    def validate(self) -> None:
        if self.n_samples < 10 or self.n_pairs < 10 or self.n_test < 10:
            self._fail("n_samples/n_pairs/n_test", "are too small", "use at least 10 of each.")
        if self.steps < 1:
            self._fail("steps", f"is {self.steps}", "train for at least one step.")

    @classmethod
    def tiny(cls) -> "RewardProducerConfig":
        return cls(n_samples=300, n_pairs=600, steps=40, n_test=400)


@register_producer
class SelfConsumingReward(Producer):
    name = "self-consuming"
    tiny_options = {"tiny": True}
    description = "Bradley-Terry reward model (MLP 2-64-64-1) curating a self-consuming GMM loop on 8 Gaussians"
    metric = Metric("pairwise_accuracy", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, steps: int | None = None):
        super().__init__(seed=seed)
        self.tiny = tiny
        base = RewardProducerConfig.tiny() if tiny else RewardProducerConfig()
        self.cfg = RewardProducerConfig(**{**asdict(base), **({"steps": steps} if steps is not None else {})})

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (2,)

    def _data(self) -> dict:
        """Round-0 generator, its training samples and pairs, and held-out samples (separate streams)."""
        if not hasattr(self, "data_"):
            rng = np.random.default_rng([self.seed, 80])
            gen = MixtureGenerator(seed=self.seed).fit(real_data(2000, rng))
            x = gen.sample(self.cfg.n_samples, rng)
            pairs, o = make_pairs(x, self.cfg.n_pairs, rng)
            test_rng = np.random.default_rng([self.seed, 81])
            x_test = gen.sample(self.cfg.n_test, test_rng)
            test_pairs, _ = make_pairs(x_test, 2 * self.cfg.n_test, test_rng)
            self.data_ = {"x": x, "pairs": pairs, "o": o, "x_test": x_test, "test_pairs": test_pairs}
        return self.data_

    def _cache_path(self):
        key = repr((self.name, self.seed, self.cfg.to_dict(), torch.__version__, np.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "SelfConsumingReward":
        def make():
            d = self._data()
            return train_reward_model(d["x"], d["pairs"], d["o"], RewardTrainConfig(steps=self.cfg.steps), seed=self.seed)

        self.module_ = module_cached(self._cache_path(), RewardMLP, make)[0]
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        return np.ascontiguousarray(self._data()["x"][:n], dtype=np.float32)

    def evaluate(self, predict) -> Evaluation:
        d = self._data()
        x, pairs = d["x_test"], d["test_pairs"]
        r_hat = np.asarray(predict(self.check_input(x.astype(np.float32))), dtype=np.float64).reshape(len(x), -1)[:, 0]
        r = true_reward(x)
        acc = pairwise_accuracy(r_hat[pairs[:, 0]], r_hat[pairs[:, 1]], r[pairs[:, 0]], r[pairs[:, 1]])
        m = len(x) // 2
        luce = curate(r_hat, m, 0.0, "sample", np.random.default_rng([self.seed, 82]))
        top = curate(r_hat, m, 0.0, "topk", None)
        return Evaluation(self.metric, acc, len(pairs), extra={
            "curated_expected_reward_luce": float(r[luce].mean()),
            "curated_expected_reward_topk": float(r[top].mean()),
            "uncurated_expected_reward": float(r.mean())})

    def report_notes(self) -> list[str]:
        return ["Only the reward model is exported; the generator (a GMM fitted by EM), the preference pairs, "
                "the attacks and the curation sampling run outside the graph in NumPy/scikit-learn."]
