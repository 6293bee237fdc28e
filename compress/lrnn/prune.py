"""Iterative magnitude pruning (IMP) of the S5 denoiser with a cubic schedule and ERK layer-wise sparsity.

Schedule (Zhu & Gupta 2017, as in the sparse-LRNN paper): the target sparsity grows as
``s(t) = s_f (1 - (1 - p)^3)`` with ``p`` the fraction of the way from ``start`` to ``end`` of
fine-tuning (5% to 90% by default), updated every ``every`` optimizer steps; between updates the
masks are re-applied after each step, so pruned weights stay zero.

Layer-wise distribution: ERK (Evci et al. 2020): a layer's density is proportional to
``(fan_in + fan_out) / (fan_in * fan_out)``, scaled so the total matches the target, with layers
that would exceed density 1 kept dense. Masks within a layer come from
``compress.prune.magnitude_masks`` on the group's magnitude (complex weights: |re + i im|).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from edgesmith.compress.prune import magnitude_masks
from edgesmith.common import Config
from edgesmith.models.lrnn.train import TrainConfig, train


@dataclass(frozen=True)
class ImpConfig(Config):
    sparsity: float = 0.9
    distribution: str = "erk"  # or "uniform"
    start: float = 0.05
    end: float = 0.9
    every: int = 10

    def validate(self) -> None:
        if not 0.0 <= self.sparsity < 1.0:
            self._fail("sparsity", f"is {self.sparsity}", "use a fraction in [0, 1).")
        if self.distribution not in ("erk", "uniform"):
            self._fail("distribution", f"is {self.distribution!r}", "use 'erk' or 'uniform'.")
        if not 0.0 <= self.start < self.end <= 1.0:
            self._fail("start", f"is {self.start} with end {self.end}", "use 0 <= start < end <= 1.")
        if self.every < 1:
            self._fail("every", f"is {self.every}", "update the masks every one or more steps.")


def cubic_schedule(step: int, total: int, final: float, start: float, end: float) -> float:
    """Target sparsity at ``step`` of ``total``: 0 before ``start``, ``final`` after ``end``, cubic between."""
    p = (step / max(total, 1) - start) / (end - start)
    p = min(max(p, 0.0), 1.0)
    return final * (1.0 - (1.0 - p) ** 3)


def layer_sparsities(shapes: list[tuple[int, int]], target: float, distribution: str = "erk") -> list[float]:
    """Per-layer sparsity for ``target`` overall sparsity (parameter-weighted), ERK or uniform."""
    numel = np.array([a * b for a, b in shapes], np.float64)
    if distribution == "uniform" or target == 0:
        return [float(target)] * len(shapes)
    raw = np.array([(a + b) / (a * b) for a, b in shapes], np.float64)
    dense = np.zeros(len(shapes), bool)
    for _ in range(len(shapes)):
        budget = (1 - target) * numel.sum() - numel[dense].sum()
        eps = budget / float((raw * numel)[~dense].sum())
        dens = np.where(dense, 1.0, eps * raw)
        if not np.any(dens[~dense] > 1.0):
            break
        dense |= dens > 1.0
    return [float(1.0 - min(d, 1.0)) for d in dens]


def group_magnitude(group: list[torch.Tensor]) -> torch.Tensor:
    return torch.sqrt(sum(p.detach() ** 2 for p in group))


class Pruner:
    """Holds one mask per prunable group of a model; ``update(s)`` re-derives them at overall sparsity ``s``."""

    def __init__(self, model, distribution: str = "erk"):
        self.model = model
        self.groups = model.prunable()
        self.shapes = [tuple(g[0].shape) for _, g in self.groups]
        self.distribution = distribution
        self.masks = [torch.ones(s, dtype=torch.bool) for s in self.shapes]
        self.current = 0.0

    def update(self, sparsity: float) -> None:
        per_layer = layer_sparsities(self.shapes, sparsity, self.distribution)
        for i, (_, group) in enumerate(self.groups):
            # masks only shrink: weights pruned earlier stay pruned (their magnitude is 0 anyway)
            self.masks[i] = magnitude_masks([group_magnitude(group)], per_layer[i], "layer")[0] & self.masks[i]
        self.current = sparsity
        self.apply()

    @torch.no_grad()
    def apply(self) -> None:
        for mask, (_, group) in zip(self.masks, self.groups):
            for p in group:
                p.mul_(mask.to(p.dtype))

    def report(self) -> list[dict]:
        return [{"layer": name, "shape": list(shape), "sparsity": float(1 - m.float().mean())}
                for (name, _), shape, m in zip(self.groups, self.shapes, self.masks)]

    def sparsity(self) -> float:
        total = sum(m.numel() for m in self.masks)
        return float(1 - sum(int(m.sum()) for m in self.masks) / total)


def prune_finetune(model, train_split, imp: ImpConfig, train_cfg: TrainConfig, log=None) -> tuple[Pruner, dict]:
    """Fine-tune ``model`` in place while pruning it to ``imp.sparsity`` on the cubic schedule."""
    pruner = Pruner(model, imp.distribution)

    def after_step(step: int, total: int) -> None:
        if step % imp.every == 0 or step == total:
            target = cubic_schedule(step, total, imp.sparsity, imp.start, imp.end)
            if step == total:
                target = imp.sparsity
            pruner.update(target)
        else:
            pruner.apply()

    hist = train(model, train_split, train_cfg, after_step=after_step, log=log)
    pruner.update(imp.sparsity)  # the final masks hold even if training stopped early on its time budget
    return pruner, hist
