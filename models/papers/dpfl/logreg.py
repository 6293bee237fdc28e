"""Logistic regression pieces shared by the federated run, the producer and the claim."""
from __future__ import annotations

import numpy as np
import torch


def augment(x) -> torch.Tensor:
    """Append the constant 1 (bias) to every row: theta = [w, b]."""
    x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
    return torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], dim=1)


def loss(theta: torch.Tensor, xa: torch.Tensor, y: torch.Tensor) -> float:
    """Mean logistic loss (natural log) of theta on augmented features ``xa``."""
    z = xa @ theta
    return float(torch.nn.functional.binary_cross_entropy_with_logits(z, y.to(torch.float64)))


def per_sample_grads(theta: torch.Tensor, xa: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(sigmoid(theta . z) - y) z for every row z of ``xa`` (norm <= ||z||)."""
    return (torch.sigmoid(xa @ theta) - y.to(torch.float64)).unsqueeze(1) * xa


def accuracy(theta: torch.Tensor, xa: torch.Tensor, y: torch.Tensor) -> float:
    return float(((xa @ theta > 0).to(torch.float64) == y.to(torch.float64)).to(torch.float64).mean())


def optimum(xa: torch.Tensor, y: torch.Tensor, iters: int = 200) -> tuple[torch.Tensor, float]:
    """Non-private minimizer of the mean training loss (full-batch L-BFGS, float64)."""
    theta = torch.zeros(xa.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([theta], max_iter=iters, tolerance_grad=1e-12, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")
    yd = y.to(torch.float64)

    def closure():
        opt.zero_grad()
        val = torch.nn.functional.binary_cross_entropy_with_logits(xa @ theta, yd)
        val.backward()
        return val

    opt.step(closure)
    theta = theta.detach()
    return theta, loss(theta, xa, y)
