"""A graph classifier whose first layer is the order-k spectrum, computed inside the graph.

``SpectrumClassifier`` takes flattened adjacency matrices (batch, n*n), computes hom(F, G) for every
pattern F of the order-k spectrum with one ``torch.einsum`` each (sums of products of adjacency
entries: exported as ONNX Einsum, exact in fp32 for these small integer counts), compresses each
with log1p, standardises them (statistics of the training graphs) and classifies with an MLP.

Why homomorphism counts rather than the injective counts of ``skew_spectrum``: over the family of
patterns with at most k edges (closed under quotients) the two vectors are related by an invertible
triangular linear map (Moebius inversion), so they carry the same information, and hom counts need
one einsum per pattern instead of one per quotient. They are invariant to node relabelling, so the
classifier is too, by construction.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edgesmith.models.papers.skew.patterns import Pattern
from edgesmith.models.papers.skew.spectrum import hom_einsum


class SpectrumFeatures(nn.Module):
    """(batch, n*n) adjacency -> (batch, n_patterns) log1p of the hom counts of binary edge-only patterns.

    log1p is applied to each count before they are stacked: the stacking (Unsqueeze + Concat) is an op
    int8 QDQ quantizes with ONE scale for all features, and raw counts span 0..10^4 (a small count such
    as the number of triangles would round to zero), while their logarithms span 0..~10.
    """

    def __init__(self, n: int, pats: tuple[Pattern, ...]):
        super().__init__()
        self.n = n
        self.specs = []
        for p in pats:
            if any(p.marks) or any(c != 1 for _, _, c in p.edges):
                raise ValueError("the in-graph spectrum covers binary, attribute-free patterns only")
            spec, ops = hom_einsum(p)
            self.specs.append((spec, len(ops)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.reshape(-1, self.n, self.n)
        return torch.stack([torch.log1p(torch.einsum(spec, *([a] * n_ops))) for spec, n_ops in self.specs], dim=1)


class SpectrumClassifier(nn.Module):
    """Spectrum features (log1p) -> standardise (fixed buffers) -> MLP with ReLU -> class logits."""

    def __init__(self, n: int, pats: tuple[Pattern, ...], hidden: int, n_classes: int):
        super().__init__()
        self.features = SpectrumFeatures(n, pats)
        f = len(pats)
        self.register_buffer("mean", torch.zeros(f))
        self.register_buffer("std", torch.ones(f))
        self.mlp = nn.Sequential(nn.Linear(f, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_classes))

    def scaled_features(self, x: torch.Tensor) -> torch.Tensor:
        return (self.features(x) - self.mean) / self.std

    def fit_scaler(self, x: torch.Tensor) -> None:
        """Set the standardisation from training inputs (a constant afterwards, part of the graph)."""
        with torch.no_grad():
            f = self.features(x)
            self.mean.copy_(f.mean(0))
            self.std.copy_(f.std(0).clamp_min(1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.scaled_features(x))


def train_classifier(model: SpectrumClassifier, x: np.ndarray, y: np.ndarray, epochs: int, lr: float,
                     weight_decay: float, seed: int) -> list[float]:
    """Full-batch Adam on cross-entropy, one thread (deterministic, and the machine stays usable)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        model.fit_scaler(xt)
        with torch.no_grad():
            feats = model.scaled_features(xt)  # fixed: the spectrum has no trainable part
        opt = torch.optim.Adam(model.mlp.parameters(), lr=lr, weight_decay=weight_decay)
        losses = []
        model.train()
        for _ in range(epochs):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model.mlp(feats), yt)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        model.eval()
        return losses
    finally:
        torch.set_num_threads(threads)
