"""Scaling down and out: knowledge distillation into narrow students, and a router over specialists.

* ``kd_loss``: Hinton et al. (2015) distillation, ``alpha * T^2 * KL(softmax(t/T) || softmax(s/T))
  + (1 - alpha) * CE(s, y)``; the ``T^2`` keeps the soft-target gradients on the scale of the hard ones.
* ``mlp``: the ``nn.Sequential`` of Linear/ReLU every teacher, student, specialist and router is made of
  (plain Linear/ReLU so the Loihi 2 Sigma-Delta export can map the single models too).
* ``ScaledOut``: a gating net over specialists, each trained on one contiguous group of classes. Its
  output is the mixture ``p(c) = g_k(x) * p_k(c | x)`` for the group ``k`` holding class ``c``, where
  ``g`` is the router's softmax (``gating="soft"``) or its one-hot argmax (``gating="hard"``). The output
  is a probability, not a logit: probabilities stay in [0, 1], which int8 QDQ quantizes evenly, while a
  masked log-probability would need a huge negative constant that wrecks the output scale.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgesmith.common import EdgesmithError

GATINGS = ("soft", "hard")


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
            temperature: float, alpha: float) -> torch.Tensor:
    """Distillation loss (mean over the batch): soft-target KL at ``temperature`` blended with hard CE."""
    t = float(temperature)
    soft_t = F.log_softmax(teacher_logits / t, dim=-1)
    soft_s = F.log_softmax(student_logits / t, dim=-1)
    kl = F.kl_div(soft_s, soft_t, reduction="batchmean", log_target=True)
    return alpha * t * t * kl + (1.0 - alpha) * F.cross_entropy(student_logits, labels)


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = n_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


def class_groups(n_classes: int, n_experts: int) -> list[list[int]]:
    """Contiguous, ordered class groups (so concatenating the experts' outputs gives class order)."""
    if not 2 <= n_experts <= n_classes:
        raise EdgesmithError(f"n_experts is {n_experts} but there are {n_classes} classes.",
                             f"use between 2 and {n_classes} specialists.")
    return [list(map(int, g)) for g in np.array_split(np.arange(n_classes), n_experts)]


def group_logits(logits: torch.Tensor, groups: list[list[int]]) -> torch.Tensor:
    """Teacher logits for "which group": log of the summed class probabilities (up to a constant)."""
    return torch.stack([torch.logsumexp(logits[:, g], dim=-1) for g in groups], dim=-1)


class ScaledOut(nn.Module):
    """Router + specialists as one module: one float input batch, class probabilities out."""

    def __init__(self, router: nn.Module, experts: list[nn.Module], gating: str = "soft"):
        super().__init__()
        if gating not in GATINGS:
            raise EdgesmithError(f"gating is {gating!r}.", f"use one of: {', '.join(GATINGS)}.")
        self.router = router
        self.experts = nn.ModuleList(experts)
        self.gating = gating

    def gates(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, n_experts) weights that sum to one: the softmax, or its argmax one-hot (ties shared)."""
        g = torch.softmax(self.router(x), dim=-1)
        if self.gating == "hard":
            top = (g >= g.max(dim=-1, keepdim=True).values).to(g.dtype)
            g = top / top.sum(dim=-1, keepdim=True)
        return g

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gates(x)
        parts = [g[:, k:k + 1] * torch.softmax(e(x), dim=-1) for k, e in enumerate(self.experts)]
        return torch.cat(parts, dim=-1)


def fit(module: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn, *, epochs: int, lr: float, seed: int,
        batch: int = 64) -> list[float]:
    """Adam over shuffled mini-batches on one thread (deterministic, and the shared machine stays usable).

    ``loss_fn(module_output, index_batch, label_batch)``; returns the mean loss per epoch.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(module.parameters(), lr=lr)
        module.train()
        history = []
        for _ in range(epochs):
            perm = torch.randperm(len(x), generator=gen)
            total = 0.0
            for i in range(0, len(x), batch):
                idx = perm[i:i + batch]
                opt.zero_grad()
                loss = loss_fn(module(x[idx]), idx, y[idx])
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            history.append(total / len(x))
    finally:
        torch.set_num_threads(threads)
    module.eval()
    return history
