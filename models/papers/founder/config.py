"""FOUNDER settings: data and models (``FounderConfig``) and behaviour learning (``PolicyConfig``)."""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import Config
from edgesmith.common.checks import is_int

REWARDS = ("temporal", "cosine")


def _positive_ints(cfg, names) -> None:
    for name in names:
        v = getattr(cfg, name)
        if not is_int(v, 1):
            cfg._fail(name, f"is {v!r}", "use a positive integer.")


@dataclass(frozen=True)
class FounderConfig(Config):
    """Offline data, world model, view-B mapping and temporal-distance head."""

    emb_dim: int = 32
    noise: float = 0.1
    n_traj: int = 400
    traj_len: int = 24
    h_dim: int = 64
    s_dim: int = 8
    hidden: int = 128
    wm_steps: int = 400
    map_steps: int = 800
    td_steps: int = 1200
    batch: int = 32
    td_batch: int = 256
    neg_frac: float = 0.25
    free_nats: float = 1.0
    lr: float = 2e-3

    def validate(self) -> None:
        _positive_ints(self, ("emb_dim", "n_traj", "h_dim", "s_dim", "hidden", "wm_steps", "map_steps",
                              "td_steps", "batch", "td_batch"))
        if not is_int(self.traj_len, 2):
            self._fail("traj_len", f"is {self.traj_len!r}", "use at least 2 steps per trajectory.")
        if not 0.0 <= self.neg_frac < 1.0:
            self._fail("neg_frac", f"is {self.neg_frac!r}", "use a fraction in [0, 1).")
        if not self.noise >= 0:
            self._fail("noise", f"is {self.noise!r}", "use a non-negative noise level.")
        if not self.lr > 0:
            self._fail("lr", f"is {self.lr!r}", "use a positive learning rate.")
        if not self.free_nats >= 0:
            self._fail("free_nats", f"is {self.free_nats!r}", "use a non-negative number of nats.")

    @classmethod
    def tiny(cls) -> "FounderConfig":
        return cls(n_traj=40, traj_len=12, h_dim=16, s_dim=4, hidden=32, wm_steps=20, map_steps=40, td_steps=40)


@dataclass(frozen=True)
class PolicyConfig(Config):
    """Goal-conditioned actor-critic in imagination and its evaluation in the real gridworld."""

    reward: str = "temporal"
    horizon: int = 12
    updates: int = 400
    batch: int = 128
    gamma: float = 0.95
    lam: float = 0.95
    entropy: float = 0.01
    lr: float = 1e-3
    hidden: int = 64
    eval_episodes: int = 200
    max_steps: int = 20

    def validate(self) -> None:
        if self.reward not in REWARDS:
            self._fail("reward", f"is {self.reward!r}", f"use one of: {', '.join(REWARDS)}.")
        _positive_ints(self, ("horizon", "updates", "batch", "hidden", "eval_episodes", "max_steps"))
        for name in ("gamma", "lam"):
            if not 0.0 < getattr(self, name) <= 1.0:
                self._fail(name, f"is {getattr(self, name)!r}", "use a value in (0, 1].")
        if not self.entropy >= 0 or not self.lr > 0:
            self._fail("entropy/lr", "are out of range", "use entropy >= 0 and lr > 0.")
