"""The ``ctrl-critic`` producer: a critic network for toy program repair, trained by SFT then GRPO (CTRL).

The module is the critic alone: encoded state (``FEATURES`` float32) -> logits over the
``L_MAX * 4`` critiques. The metric is pass@1 after one critique round: the critic critiques each
buggy test program greedily, the fixed rule-based generator revises, the hidden tests decide.
Program execution, the generator and the masking of critiques that do not exist run outside the
exported graph, in this producer's evaluation code. ``tiny=True`` is the seconds-long test version.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import cache_dir, module_cached
from edgesmith.models.papers.ctrl.config import CtrlConfig
from edgesmith.models.papers.ctrl.critic import FEATURES, CriticNet, encode_batch
from edgesmith.models.papers.ctrl.train import grpo, iterate, network_policy, no_critique_policy, sft
from edgesmith.models.papers.ctrl.world import sample_problems


def problem_sets(cfg: CtrlConfig) -> dict:
    """The SFT training problems and the test problems, from disjoint seed streams of ``cfg.seed``."""
    return {"sft": sample_problems(cfg.n_sft, cfg.seed * 1000 + 1),
            "test": sample_problems(cfg.n_test, cfg.seed * 1000 + 2)}


def train_critic(cfg: CtrlConfig, stage: str = "ctrl", progress: bool = False) -> tuple[CriticNet, dict]:
    """Stage 1 (and stage 2 unless ``stage == "sft"``) on one thread; returns the critic and its history."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net = CriticNet(cfg.hidden, seed=cfg.seed)
        history = {"sft_loss": sft(net, problem_sets(cfg)["sft"], cfg, progress=progress)}
        if stage != "sft" and cfg.grpo_iters:
            history["grpo"] = grpo(net, cfg, progress=progress)
    finally:
        torch.set_num_threads(threads)
    return net.eval(), history


@register_producer
class CtrlCritic(Producer):
    name = "ctrl-critic"
    tiny_options = {"tiny": True}
    description = "CTRL critic (SFT + GRPO) for toy program repair with a fixed rule-based generator (paper 10)"
    metric = Metric("pass@1", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, grpo_iters: int | None = None):
        super().__init__(seed=seed)
        self.tiny = tiny
        cfg = CtrlConfig.tiny(seed) if tiny else CtrlConfig(seed=seed)
        if grpo_iters is not None:
            cfg = CtrlConfig.from_dict({**cfg.to_dict(), "grpo_iters": grpo_iters})
        self.cfg = cfg

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (FEATURES,)

    def problems(self) -> dict:
        if not hasattr(self, "problems_"):
            self.problems_ = problem_sets(self.cfg)
        return self.problems_

    def _cache_path(self):
        key = repr((self.name, self.cfg.to_dict(), torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "CtrlCritic":
        def make():
            net, self.history_ = train_critic(self.cfg)
            return net

        self.module_ = module_cached(self._cache_path(), lambda: CriticNet(self.cfg.hidden, seed=self.seed), make)[0]
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        """Encoded buggy programs of the SFT training problems (more are drawn past ``n_sft`` if asked)."""
        probs = self.problems()["sft"]
        if n > len(probs):
            probs = sample_problems(n, self.cfg.seed * 1000 + 1)
        return np.ascontiguousarray(encode_batch([(p.buggy, p) for p in probs[:n]]))

    def evaluate(self, predict, rounds: int = 3) -> Evaluation:
        test = self.problems()["test"]
        rates = iterate(test, network_policy(lambda x: np.asarray(predict(x))), rounds)
        extra = {f"pass_after_{r}_rounds": float(rates[r]) for r in range(2, rounds + 1)}
        extra["no_critique_pass@1"] = float(iterate(test, no_critique_policy, 1)[1])
        return Evaluation(self.metric, float(rates[1]), len(test), extra=extra)

    def report_notes(self) -> list[str]:
        return ["Program execution, the rule-based generator and the masking of critiques that do not exist "
                "for a program run outside the exported graph, in the producer's evaluation code; the graph "
                "is the critic network only (state features -> critique logits).",
                "pass@1 uses greedy critiques: one critique round per buggy test program, judged by the hidden tests."]
