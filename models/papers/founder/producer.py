"""The ``founder`` producer: FOUNDER's learned reward (paper 13) on a two-room gridworld, trained here.

``build()`` collects reward-free random-walk data, trains the RSSM world model on view A, the
mapping of view-B embeddings into its states and the temporal-distance head (``pipeline.py``). The
exported module is the reward: input ``[e_t, e_g]`` (two view-B embeddings, packed in one row of
2 x emb_dim), output ``-D(Q(e_t), Q(e_g))``. Metric: Spearman correlation of that reward with minus
the true (BFS) distance over every ordered pair of free cells, with fresh view-B noise (higher is
better, 1 is a perfect ranking). The world-model filter, the imagination rollouts and the policy
are not part of the graph (the policy study is ``bench.studies.founder_claim``).

Details beyond the abstract are unconfirmed (see ``grounding.py`` for the choices made).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import cache_dir, cached
from edgesmith.models.papers.founder.config import FounderConfig
from edgesmith.models.papers.founder.env import GridWorld
from edgesmith.models.papers.founder.grounding import RewardHead, spearman
from edgesmith.models.papers.founder.pipeline import make_parts, offline_data, train_parts

TEST_NOISE_OFFSET = 10_000  # view-B noise of the evaluation pairs comes from seed + this: never seen in training


@register_producer
class Founder(Producer):
    name = "founder"
    tiny_options = {"tiny": True}
    description = "FOUNDER: view-B embedding mapped into an RSSM world model, temporal-distance reward (gridworld)"
    metric = Metric("spearman_reward_vs_neg_bfs", higher_is_better=True, unit="")

    def __init__(self, seed: int = 0, tiny: bool = False):
        super().__init__(seed=seed)
        self.tiny = bool(tiny)
        self.cfg = FounderConfig.tiny() if tiny else FounderConfig()
        self.world = GridWorld()

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (2 * self.cfg.emb_dim,)

    def data(self):
        if not hasattr(self, "data_"):
            self.data_ = offline_data(self.world, self.cfg, self.seed)
        return self.data_

    def _cache_path(self):
        key = repr((self.name, self.seed, asdict(self.cfg), self.world.layout, torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "Founder":
        def make():
            parts = make_parts(self.world, self.cfg, self.seed)
            self.train_info_ = train_parts(parts, self.world, self.data(), self.cfg, self.seed)
            return parts

        def load(p):
            parts = make_parts(self.world, self.cfg, self.seed)
            for part, sd in zip(parts, torch.load(p, weights_only=True), strict=True):
                part.load_state_dict(sd)
            return parts

        parts, _ = cached(self._cache_path(), make, load=load,
                          save=lambda ps, tmp: torch.save([p.state_dict() for p in ps], tmp))
        self.rssm_, self.mapping_, self.distance_ = (p.eval() for p in parts)
        self.module_ = RewardHead(self.mapping_, self.distance_, self.cfg.emb_dim).eval()
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        """Pairs of view-B embeddings of states visited in the offline (training) data."""
        emb = self.data().emb.reshape(-1, self.cfg.emb_dim)
        rng = np.random.default_rng(self.seed + 1)
        a, b = rng.integers(len(emb), size=(2, n))
        return np.ascontiguousarray(np.concatenate([emb[a], emb[b]], axis=1))

    def test_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Inputs for every ordered (cell, goal) pair of free cells, with fresh noise, and their BFS distances."""
        cells = np.array(self.world.cells)
        i, j = np.meshgrid(np.arange(len(cells)), np.arange(len(cells)), indexing="ij")
        i, j = i.ravel(), j.ravel()
        rng = np.random.default_rng(self.seed + TEST_NOISE_OFFSET)
        e_t = self.world.view_b(cells[i], self.cfg.emb_dim, self.cfg.noise, rng)
        e_g = self.world.view_b(cells[j], self.cfg.emb_dim, self.cfg.noise, rng)
        table = self.world.distance_table()
        dist = table[[self.world.index(c) for c in cells[i]], [self.world.index(c) for c in cells[j]]]
        return np.ascontiguousarray(np.concatenate([e_t, e_g], axis=1)), dist

    def evaluate(self, predict) -> Evaluation:
        x, dist = self.test_pairs()
        r = np.asarray(predict(self.check_input(x)), dtype=np.float64).reshape(len(x))
        rho = spearman(r, -dist)
        near = float(r[dist <= 2].mean())
        far = float(r[dist >= 8].mean())
        return Evaluation(self.metric, rho, len(x), extra={"mean_reward_bfs_le_2": near, "mean_reward_bfs_ge_8": far})

    def report_notes(self) -> list[str]:
        return ["The exported graph is the reward only: the view-B mapping Q and the temporal-distance head D, "
                "input [e_t, e_g], output -D(Q(e_t), Q(e_g)).",
                "The world model's filter over view-A observations, the imagination rollouts and the "
                "goal-conditioned policy run outside the graph (bench.studies.founder_claim)."]
