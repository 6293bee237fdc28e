"""Config dataclasses of the gnn-iia producer: data, model and training, validated and JSON round-tripping."""
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
    """Synthetic graphs with a known causal model (see ``models.papers.gnn_causal.data``).

    ``prompt_lengths``: one prompt per entry, each that many prompt tokens before the node's text;
    ``m_tokens``: token features sampled per node and prompt; ``d_token``: the frozen encoder's width.
    """

    n_train: int = 800
    n_test: int = 300
    min_nodes: int = 6
    max_nodes: int = 12
    text_len: int = 12
    prompt_lengths: tuple = (10, 2, 6)
    m_tokens: int = 8
    d_token: int = 32
    seed: int = 0

    def validate(self) -> None:
        _positive_int(self, "n_train")
        _positive_int(self, "n_test")
        _positive_int(self, "min_nodes", 2)
        if not is_int(self.max_nodes, self.min_nodes):
            self._fail("max_nodes", f"is {self.max_nodes!r} with min_nodes {self.min_nodes}",
                       "use max_nodes >= min_nodes.")
        _positive_int(self, "text_len", 6)
        if not self.prompt_lengths or not all(isinstance(p, int) and p >= 1 for p in self.prompt_lengths):
            self._fail("prompt_lengths", f"is {self.prompt_lengths!r}", "give one positive token count per prompt.")
        _positive_int(self, "m_tokens")
        if self.m_tokens > self.text_len + min(self.prompt_lengths):
            self._fail("m_tokens", f"is {self.m_tokens}, more than the shortest prompt's sequence",
                       "sample at most text_len + the shortest prompt length tokens.")
        _positive_int(self, "d_token", 4)
        if self.d_token % 2:
            self._fail("d_token", f"is {self.d_token}", "use an even width (sine/cosine positions).")

    @property
    def n_prompts(self) -> int:
        return len(self.prompt_lengths)

    @classmethod
    def tiny(cls, seed: int = 0) -> "DataConfig":
        return cls(n_train=96, n_test=48, min_nodes=4, max_nodes=6, m_tokens=4, d_token=16, seed=seed)


TRANSMISSIONS = ("attention", "mean", "mean-mlp")


@dataclass(frozen=True)
class ModelConfig(Config):
    """GNN over the node features: ``layers`` message-passing layers of width ``hidden``, sum readout.

    ``transmission``: "attention" (the attention-based transmission module), "mean" (plain mean of the
    token features, the usual pooling of an LLM enhancer's output) or "mean-mlp" (the mean followed by
    the module's residual feed-forward block: a control with the module's per-node capacity but no
    token weighting).
    """

    d_token: int = 32
    hidden: int = 32
    layers: int = 2
    n_classes: int = 3
    transmission: str = "attention"

    def validate(self) -> None:
        _positive_int(self, "d_token", 2)
        _positive_int(self, "hidden", 2)
        _positive_int(self, "layers")
        _positive_int(self, "n_classes", 2)
        if self.transmission not in TRANSMISSIONS:
            self._fail("transmission", f"is {self.transmission!r}", f"use one of: {', '.join(TRANSMISSIONS)}.")


@dataclass(frozen=True)
class TrainConfig(Config):
    """``warmup_epochs``: epochs over all prompts before the best prompt is fixed; ``iit_weight``: weight of
    the interchange-intervention loss (0 turns it off); ``iit_layers``: layers it intervenes at."""

    epochs: int = 40
    warmup_epochs: int = 5
    lr: float = 3e-3
    batch: int = 32
    iit_weight: float = 0.0
    iit_layers: tuple = (0, 1)
    seed: int = 0

    def validate(self) -> None:
        _positive_int(self, "epochs", 0)
        _positive_int(self, "warmup_epochs", 0)
        if self.warmup_epochs > self.epochs:
            self._fail("warmup_epochs", f"is {self.warmup_epochs}, more than the {self.epochs} epochs",
                       "use at most as many warm-up epochs as epochs.")
        _positive_int(self, "batch")
        if not self.lr > 0:
            self._fail("lr", f"is {self.lr!r}", "use a positive learning rate.")
        if not self.iit_weight >= 0:
            self._fail("iit_weight", f"is {self.iit_weight!r}", "use 0 (off) or a positive weight.")
        if not all(isinstance(v, int) and v >= 0 for v in self.iit_layers):
            self._fail("iit_layers", f"is {self.iit_layers!r}", "list layer indices (0 = node features).")
