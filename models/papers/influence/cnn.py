"""The two-layer ReLU^q CNN of the benign-overfitting analyses and its gradient-descent training."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edgesmith.models.papers.influence.config import CnnConfig


class TwoPatchCNN(nn.Module):
    """``F_j(x) = 1/m sum_r sum_p ReLU(<w_{j,r}, x_p>)^q`` for j in {-1, +1}; returns ``[F_-, F_+]``.

    The filters are one bias-free ``nn.Linear(d, 2m)`` applied to each patch (rows ``:m`` are the
    class -1 filters, ``m:`` the class +1 ones), so the graph exports as a MatMul that int8 and int4
    quantizers can rewrite. The second layer is fixed (+-1/m), as in the analysis, so it is a mean
    over filters. ``argmax`` of the output is the class index (0: y = -1, 1: y = +1) and
    ``F_+ - F_-`` is the margin ``f(W, x)``.
    """

    def __init__(self, d: int, cfg: CnnConfig, seed: int = 0):
        super().__init__()
        self.m, self.q = cfg.m, float(cfg.q)
        self.filters = nn.Linear(d, 2 * cfg.m, bias=False)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.filters.weight.copy_(torch.randn(2 * cfg.m, d, generator=gen) * cfg.init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.filters(x)  # (batch, 2 patches, 2m)
        # ReLU written as max(z, 0): onnxruntime's QDQ quantizer folds a Relu that follows a MatMul into
        # it and drops the MatMul's output tensor, which the int8 pass's per-layer report reads
        a = torch.maximum(z, torch.zeros_like(z))
        if self.q != 1.0:
            a = a ** self.q
        s = a.sum(dim=1)  # sum over patches
        return torch.stack([s[:, : self.m].mean(dim=1), s[:, self.m:].mean(dim=1)], dim=1)


def margin(module: TwoPatchCNN, x: torch.Tensor) -> torch.Tensor:
    out = module(x)
    return out[:, 1] - out[:, 0]


def train_gd(module: TwoPatchCNN, x: np.ndarray, y: np.ndarray, cfg: CnnConfig) -> list[float]:
    """Full-batch gradient descent on the mean logistic loss ``log(1 + exp(-y f))``; returns the loss
    every 50 steps. Runs on one thread so the result does not depend on the core count."""
    xt, yt = torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(y, np.float32))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    history = []
    try:
        module.train()
        for step in range(cfg.steps):
            loss = nn.functional.softplus(-yt * margin(module, xt)).mean()
            module.zero_grad()
            loss.backward()
            with torch.no_grad():
                module.filters.weight -= cfg.lr * module.filters.weight.grad
            if step % 50 == 0 or step == cfg.steps - 1:
                history.append(float(loss.detach()))
    finally:
        torch.set_num_threads(threads)
        module.eval()
    return history
