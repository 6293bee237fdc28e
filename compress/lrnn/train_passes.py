"""Training passes of the S5 denoiser: ``prune-lrnn`` (iterative magnitude pruning with fine-tuning) and
``qat-lrnn`` (quantization-aware fine-tuning, w8a16, masks held), both torch -> torch.

They fine-tune on the producer's training data (``PassContext.train_data``: the train split of clean
and noisy clips) and never touch the model they are given (they work on a copy). Each result is
cached under ``cache_dir()/models`` by a hash of the input weights, the pass config and the training
data, so a second deploy reuses it; a damaged cache entry is retrained (``common.load_or_train``).
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from edgesmith.common import EdgesmithError, cache_dir, load_or_train
from edgesmith.common.checks import is_int
from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass


def _check_model(artifact: Artifact, kind: str):
    from edgesmith.models.lrnn.s5 import S5Denoiser

    if not isinstance(artifact.module, S5Denoiser):
        raise EdgesmithError(f"{kind} takes the S5 denoiser, not {type(artifact.module).__name__}.",
                             "use it on stream models built on models.lrnn.s5 (lrnn-denoiser).")


def _train_split(ctx: PassContext, kind: str):
    split = ctx.train_data
    named = set(getattr(split, "__dataclass_fields__", {}))  # a Split: no need to read its arrays to know
    if split is None or not ({"noisy", "clean"} <= named or (hasattr(split, "noisy") and hasattr(split, "clean"))):
        raise EdgesmithError(f"{kind} fine-tunes the model but no training data was given.",
                             "deploy a producer that provides training_data() (clean and noisy clips).")
    return split


# a pass whose training changed (same config, different result) gets a new tag here, so its cache key changes
TRAINING_VERSION = {"qat-lrnn": b"fake-quant-of-the-folded-weights, one scale for C"}


def _cache_path(kind: str, module, config: PassConfig, split) -> "Path":  # noqa: F821
    h = hashlib.sha256(config.to_json().encode() + torch.__version__.encode() + TRAINING_VERSION.get(kind, b""))
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().numpy().tobytes())
    if getattr(split, "key", ""):
        # a producer's split is named by its recipe, not its bytes: speech synthesis and FFTs may differ in the
        # last bits between machines, and the shipped weights must still be found (models/weights/README.md)
        h.update(b"split:" + split.key.encode())
    else:
        for a in (split.noisy, split.clean):
            h.update(np.ascontiguousarray(a).tobytes())
    return cache_dir() / "models" / f"{kind}-{h.hexdigest()[:16]}.pt"


def _sparsity(model) -> float:
    params = [p for _, g in model.prunable() for p in g]
    return 1.0 - sum(int(torch.count_nonzero(p)) for p in params) / sum(p.numel() for p in params)


@dataclass
class PruneLrnnConfig(PassConfig):
    """Unstructured magnitude pruning to ``sparsity`` (ERK per layer, cubic schedule reaching it at ``end``
    of ``epochs`` of fine-tuning, learning rate ``lr``)."""

    kind: ClassVar[str] = "prune-lrnn"
    contract_fixture: ClassVar[str] = "s5-torch"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "torch"

    sparsity: float = 0.9
    epochs: int = 10
    end: float = 0.6
    lr: float = 1e-3
    seed: int = 0

    def validate(self) -> None:
        if isinstance(self.sparsity, bool) or not 0.0 < float(self.sparsity) < 1.0:
            self._fail("sparsity", f"is {self.sparsity!r}", "use a fraction in (0, 1), e.g. 0.9.")
        if not is_int(self.epochs, 1):
            self._fail("epochs", f"is {self.epochs!r}", "use at least one epoch.")
        if not 0.0 < float(self.end) <= 1.0:
            self._fail("end", f"is {self.end!r}", "use a fraction in (0, 1].")
        if not 0.0 < float(self.lr) < 1.0:
            self._fail("lr", f"is {self.lr!r}", "use a small positive learning rate, e.g. 1e-3.")


@register_pass(PruneLrnnConfig)
def _prune_lrnn(artifact: Artifact, config: PruneLrnnConfig, ctx: PassContext) -> PassResult:
    from edgesmith.compress.lrnn.prune import ImpConfig, prune_finetune
    from edgesmith.models.lrnn.train import TrainConfig

    def train(model, split):
        prune_finetune(model, split, ImpConfig(sparsity=config.sparsity, end=config.end),
                       TrainConfig(epochs=config.epochs, lr=config.lr, seed=config.seed))

    return _fine_tune(artifact, config, ctx, train, "weights stored dense in torch; the fixed-point export stores "
                                                    "only nonzeros")


def _fine_tune(artifact: Artifact, config: PassConfig, ctx: PassContext, train, note: str) -> PassResult:
    """A copy of the S5 model fine-tuned by ``train(model, split)`` (or its cached result), with the report."""
    _check_model(artifact, config.kind)
    model = copy.deepcopy(artifact.module)
    cached = True
    if config.epochs > 0:
        split = _train_split(ctx, config.kind)
        path = _cache_path(config.kind, artifact.module, config, split)
        cached = load_or_train(model, path, lambda: train(model, split) or True) is None
    model.eval()
    new = Artifact("torch", module=model, meta=dict(artifact.meta))
    sp = _sparsity(model)
    report = PassReport(config.to_dict(), "torch", "torch", artifact.size_bytes(), new.size_bytes(),
                        notes=[f"weight sparsity {sp:.3f} over the prunable matrices; {note}",
                               "from the cache" if cached else f"fine-tuned {config.epochs} epoch(s)"],
                        extra={"sparsity": sp, "from_cache": cached})
    return PassResult(new, report)


@dataclass
class QatLrnnConfig(PassConfig):
    """Quantization-aware fine-tuning for the w8a16 fixed-point form (fake-quantized weights, table
    sigmoid), ``epochs`` at learning rate ``lr``; zero weights stay zero (pruning masks are held)."""

    kind: ClassVar[str] = "qat-lrnn"
    contract_fixture: ClassVar[str] = "s5-torch"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "torch"

    # 30 epochs at 1e-3 (was 10 at 3e-4): chosen on the validation split, 2026-12-04; the trials are in
    # models/weights/README.md
    epochs: int = 30
    lr: float = 1e-3
    seed: int = 0

    def validate(self) -> None:
        if not is_int(self.epochs, 0):
            self._fail("epochs", f"is {self.epochs!r}", "use a whole number of epochs (0 skips fine-tuning).")
        if not 0.0 < float(self.lr) < 1.0:
            self._fail("lr", f"is {self.lr!r}", "use a small positive learning rate, e.g. 3e-4.")


@register_pass(QatLrnnConfig)
def _qat_lrnn(artifact: Artifact, config: QatLrnnConfig, ctx: PassContext) -> PassResult:
    from edgesmith.compress.lrnn.fixed import qat_finetune
    from edgesmith.compress.lrnn.prune import Pruner
    from edgesmith.models.lrnn.train import TrainConfig

    def train(model, split):
        pruner = Pruner(model)
        pruner.masks = [p[0].detach() != 0 for _, p in model.prunable()]
        qat_finetune(model, split, TrainConfig(epochs=config.epochs, lr=config.lr, seed=config.seed),
                     after_step=lambda s, t: pruner.apply())

    return _fine_tune(artifact, config, ctx, train, "quantization-aware fine-tuning for w8a16 (zero weights held "
                                                    "at zero); the float module keeps fake-quant off")
