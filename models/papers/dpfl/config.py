"""Settings of one DP federated run (validated on construction, JSON round trip)."""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import Config
from edgesmith.models.papers.dpfl.privacy import SCHEDULES

METHODS = ("cancel", "fresh", "nonprivate")


@dataclass(frozen=True)
class DPFLConfig(Config):
    """mu^2-SGD federated logistic regression with ``m`` of ``clients`` participating per round.

    Rounds are grouped in cycles: each cycle is a random partition of the clients into groups of
    ``m``, one group per round, so every client participates exactly once per cycle and uses a fresh
    minibatch of ``batch`` samples each time; ``per_client // batch`` cycles make one pass over the
    data (T = cycles * clients / m rounds, n = m T b samples used). ``lr``: w <- w - (lr / T) q_t.
    ``method``: ``cancel`` (noise cancellation), ``fresh`` (independent noise each message),
    ``nonprivate``. ``epsilon``/``delta``: the target (epsilon, delta)-DP of every sample.
    """

    clients: int = 40
    per_client: int = 250
    dim: int = 32
    m: int = 10
    batch: int = 5
    lr: float = 4.0
    radius: float = 10.0
    clip: float = 1.5
    epsilon: float = 1.0
    delta: float = 1e-5
    method: str = "cancel"
    schedule: str = "growing"
    data_seed: int = 0
    seed: int = 0

    def validate(self) -> None:
        for name in ("clients", "per_client", "dim", "m", "batch"):
            if int(getattr(self, name)) < 1:
                self._fail(name, f"is {getattr(self, name)}", "use a positive integer.")
        if self.m > self.clients or self.clients % self.m:
            self._fail("m", f"is {self.m} with {self.clients} clients",
                       "use a participant count that divides the number of clients.")
        if self.batch > self.per_client:
            self._fail("batch", f"is {self.batch} > {self.per_client} samples per client", "use a smaller batch.")
        for name in ("lr", "radius", "clip", "epsilon"):
            if not getattr(self, name) > 0:
                self._fail(name, f"is {getattr(self, name)}", "use a positive value.")
        if not 0 < self.delta < 1:
            self._fail("delta", f"is {self.delta}", "use a value in (0, 1) such as 1e-5.")
        if self.method not in METHODS:
            self._fail("method", f"is {self.method!r}", f"use one of: {', '.join(METHODS)}.")
        if self.schedule not in SCHEDULES:
            self._fail("schedule", f"is {self.schedule!r}", f"use one of: {', '.join(SCHEDULES)}.")

    @property
    def cycles(self) -> int:
        return self.per_client // self.batch

    @property
    def rounds(self) -> int:
        return self.cycles * self.clients // self.m
