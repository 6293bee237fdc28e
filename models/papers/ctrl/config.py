"""Config of the ``ctrl-critic`` producer's training: validated on construction, JSON round trip."""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import Config
from edgesmith.common.checks import is_int


@dataclass(frozen=True)
class CtrlConfig(Config):
    """Stage 1 (SFT on execution-built feedback) and stage 2 (GRPO) settings, and the test set size.

    SFT sees ``n_sft`` problems labelled by running every critique through the generator (the
    expensive, exhaustive supervision); GRPO then trains on ``grpo_iters * batch`` fresh problems
    from the reward alone: ``group`` critiques sampled per problem, reward 1 if the revision passes
    the hidden tests, advantages ``(r - mean) / std`` within the group, plus ``kl`` times the KL
    divergence to the frozen stage-1 policy.
    """

    hidden: int = 256
    n_sft: int = 1000
    sft_epochs: int = 40
    sft_lr: float = 2e-3
    grpo_iters: int = 400
    batch: int = 32
    group: int = 8
    grpo_lr: float = 5e-4
    kl: float = 0.02
    n_test: int = 500
    seed: int = 0

    def validate(self) -> None:
        for name in ("hidden", "n_sft", "sft_epochs", "batch", "n_test"):
            v = getattr(self, name)
            if not is_int(v, 1):
                self._fail(name, f"is {v!r}", "use a whole number of at least 1.")
        if not is_int(self.grpo_iters, 0):
            self._fail("grpo_iters", f"is {self.grpo_iters!r}", "use 0 (SFT only) or more iterations.")
        if not is_int(self.group, 2):
            self._fail("group", f"is {self.group!r}", "use at least 2 critiques per group: advantages compare them.")
        for name in ("sft_lr", "grpo_lr"):
            if not getattr(self, name) > 0:
                self._fail(name, f"is {getattr(self, name)!r}", "use a positive learning rate.")
        if not self.kl >= 0:
            self._fail("kl", f"is {self.kl!r}", "use a KL weight of 0 or more.")

    @classmethod
    def tiny(cls, seed: int = 0) -> "CtrlConfig":
        return cls(hidden=64, n_sft=150, sft_epochs=10, grpo_iters=15, batch=16, group=4, n_test=60, seed=seed)
