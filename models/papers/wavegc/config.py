"""Config dataclasses of the WaveGC producer: data, model and training, validated and JSON round-tripping."""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import Config
from edgesmith.common.checks import is_int


def _positive_int(cfg: Config, name: str, minimum: int = 1) -> None:
    v = getattr(cfg, name)
    if not is_int(v, minimum):
        cfg._fail(name, f"is {v!r}", f"use a whole number of at least {minimum}.")


@dataclass(frozen=True)
class DataConfig(Config):
    """Long-range node regression on path- and ring-like graphs (see ``models.papers.wavegc.data``).

    ``max_nodes`` fixes the padded node count of the packed input; graphs have ``min_nodes`` to
    ``max_nodes`` nodes, ``n_sources`` signed sources each, and the long-range part of the target
    decays as ``decay ** hops`` from every source.
    """

    n_train: int = 640
    n_test: int = 192
    min_nodes: int = 32
    max_nodes: int = 64
    n_sources: int = 2
    decay: float = 0.9
    seed: int = 0

    def validate(self) -> None:
        _positive_int(self, "n_train")
        _positive_int(self, "n_test")
        _positive_int(self, "min_nodes", 4)
        _positive_int(self, "n_sources")
        if not is_int(self.max_nodes, self.min_nodes):
            self._fail("max_nodes", f"is {self.max_nodes!r} with min_nodes {self.min_nodes}",
                       "use max_nodes >= min_nodes.")
        if self.n_sources > self.min_nodes // 2:
            self._fail("n_sources", f"is {self.n_sources} for graphs of {self.min_nodes} nodes",
                       "use at most half of min_nodes sources.")
        if not 0.0 < self.decay < 1.0:
            self._fail("decay", f"is {self.decay!r}", "use a decay between 0 and 1 (0.9 reaches ~20 hops).")

    @classmethod
    def tiny(cls, seed: int = 0) -> "DataConfig":
        return cls(n_train=48, n_test=24, min_nodes=12, max_nodes=16, seed=seed)


@dataclass(frozen=True)
class WaveGCConfig(Config):
    """Model shape. ``n_cheb``: Chebyshev terms per family; ``n_scales``: wavelets J; ``s_max``: the
    largest scale; ``admissible=False`` is the ablation whose wavelets use odd terms (g(0) = 1)."""

    in_features: int = 4
    hidden: int = 32
    layers: int = 3
    n_cheb: int = 3
    n_scales: int = 3
    s_max: float = 10.0
    eig_hidden: int = 16
    admissible: bool = True

    def validate(self) -> None:
        _positive_int(self, "in_features")
        _positive_int(self, "layers")
        _positive_int(self, "n_cheb")
        _positive_int(self, "n_scales")
        _positive_int(self, "eig_hidden", 2)
        if self.eig_hidden % 2:
            self._fail("eig_hidden", f"is {self.eig_hidden}", "use an even width (sine and cosine halves).")
        _positive_int(self, "hidden", self.n_scales + 1)
        if not self.s_max > 0:
            self._fail("s_max", f"is {self.s_max!r}", "use a positive largest scale, e.g. 10.")
        if not isinstance(self.admissible, bool):
            self._fail("admissible", f"is {self.admissible!r}", "use true or false.")


@dataclass(frozen=True)
class TrainConfig(Config):
    epochs: int = 60
    lr: float = 3e-3
    batch: int = 32
    seed: int = 0

    def validate(self) -> None:
        _positive_int(self, "epochs", 0)
        _positive_int(self, "batch")
        if not self.lr > 0:
            self._fail("lr", f"is {self.lr!r}", "use a positive learning rate.")
