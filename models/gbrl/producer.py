"""``gbrl-cartpole``: a GBRL tree policy for CartPole-v1, trained here with PPO (or loaded from cache).

The module is the policy ensemble (``GBTEnsemble``: 4 observations -> 2 action logits; the value
output of the shared actor-critic is dropped), so it flows through ``export-tree-onnx`` /
``export-tree-c`` like any trees artifact. The metric is the mean episodic return of the greedy
policy (argmax of the predicted logits) over 10 seeded episodes; 500 is the maximum.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import cache_dir
from edgesmith.models.gbrl.ensemble import GBTEnsemble
from edgesmith.models.gbrl.rl import PPO, PPOConfig, evaluate_policy

ENV_ID = "CartPole-v1"
WEIGHTS = Path(__file__).resolve().parent / "weights"


@register_producer
class GBRLCartPole(Producer):
    name = "gbrl-cartpole"
    description = "GBRL (gradient-boosted trees) PPO policy on CartPole-v1, 100k steps (~2 min on 2 cores)"
    metric = Metric("mean_return", higher_is_better=True, unit="reward per episode")
    kind = "tree-policy"
    native_format = "trees"
    tiny_options = {"steps": 4096, "eval_episodes": 2, "cache": False}

    def __init__(self, seed: int = 0, steps: int = 100_000, eval_episodes: int = 10, cache: bool = True):
        super().__init__(seed=seed)
        self.steps, self.eval_episodes, self.cache = int(steps), int(eval_episodes), cache

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (4,)

    def cache_path(self):
        return cache_dir() / "gbrl" / self._file_name()

    def shipped_path(self):
        """Weights trained here and committed (seed 0, 100k steps), so a first deploy does not train for minutes.
        Reproduce: delete the file and the cache entry, then build; training is seeded."""
        return WEIGHTS / self._file_name()

    def _file_name(self) -> str:
        return f"{self.name}-seed{self.seed}-{self.steps}.npz"

    def build(self) -> "GBRLCartPole":
        for path in (self.shipped_path(), self.cache_path()):
            if self.cache and path.exists():
                self.module_ = GBTEnsemble.load(path)
                return self
        path = self.cache_path()
        algo = PPO(ENV_ID, policy="tree", seed=self.seed, config=PPOConfig()).learn(self.steps)
        self.module_ = algo.policy.policy_ensemble()
        self.history_ = algo.history
        if self.cache:
            self.module_.save(path, force=True)
        return self

    def _make_env(self):
        import gymnasium as gym

        return gym.make(ENV_ID)

    def calibration_data(self, n: int = 128) -> np.ndarray:
        """Observations visited by the trained greedy policy (seeded episodes), first ``n``."""
        ens = self.module
        obs_all: list[np.ndarray] = []
        ep = 0
        while len(obs_all) < n:
            env = self._make_env()
            obs, _ = env.reset(seed=self.seed + 50_000 + ep)
            done = False
            while not done and len(obs_all) < n:
                obs_all.append(np.asarray(obs, np.float32))
                a = int(ens.predict(obs[None]).argmax())
                obs, _, term, trunc, _ = env.step(a)
                done = term or trunc
            ep += 1
        return np.ascontiguousarray(np.stack(obs_all))

    def evaluate(self, predict) -> Evaluation:
        def act(o):
            return np.asarray(predict(np.asarray(o, np.float32))).argmax(axis=1)

        value = evaluate_policy(act, self._make_env, self.eval_episodes, seed=10_000 + self.seed)
        return Evaluation(self.metric, value, self.eval_episodes, extra={"env": ENV_ID, "steps": self.steps})
