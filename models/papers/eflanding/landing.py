"""The landing field on the Stiefel manifold St(n, p) = {X in R^{n x p}: X^T X = I} (Ablin & Peyre;
Vary et al., simonvary/landing-stiefel), and its block-wise form (EF-Landing, Song et al. 2025).

    L(X) = skew(G X^T) X + lambda X (X^T X - I),   G = grad f(X),  skew(A) = (A - A^T) / 2
    X <- X - eta L(X)                               (no retraction)

The first term is the relative (Riemannian-like) gradient and is tangent-like; the second is the
gradient of N(X) = ||X^T X - I||_F^2 / 4 and pulls X back to the manifold. The two are orthogonal
(<skew(G X^T) X, X (X^T X - I)> = 0), so L vanishes exactly when X is on the manifold at a critical
point of f. Block-wise: X is a list of blocks, each on its own Stiefel manifold, each with its own
landing term.
"""
from __future__ import annotations

import torch


def skew(a: torch.Tensor) -> torch.Tensor:
    return 0.5 * (a - a.transpose(-1, -2))


def relative_gradient(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """skew(G X^T) X: the component of the field that moves along the manifold."""
    return skew(g @ x.transpose(-1, -2)) @ x


def normal_term(x: torch.Tensor) -> torch.Tensor:
    """X (X^T X - I) = grad of ||X^T X - I||_F^2 / 4."""
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    return x @ (x.transpose(-1, -2) @ x - eye)


def landing_field(x: torch.Tensor, g: torch.Tensor, lam: float) -> torch.Tensor:
    return relative_gradient(x, g) + lam * normal_term(x)


def blockwise_landing_field(xs: list[torch.Tensor], gs: list[torch.Tensor], lam: float) -> list[torch.Tensor]:
    """One landing term per block (a product of Stiefel manifolds)."""
    return [landing_field(x, g, lam) for x, g in zip(xs, gs)]


def feasibility(x: torch.Tensor) -> float:
    """||X^T X - I||_F: distance of X from the manifold's defining equation."""
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    return float(torch.linalg.matrix_norm(x.transpose(-1, -2) @ x - eye))


def polar(x: torch.Tensor) -> torch.Tensor:
    """The closest point of the manifold to X (U V^T of its thin SVD), used to score off-manifold iterates."""
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    return u @ vh
