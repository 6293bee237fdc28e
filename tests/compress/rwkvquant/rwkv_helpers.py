"""Small RWKV models for the quantizer tests: random weights moved off their init so no matrix is degenerate."""
from __future__ import annotations

import torch

from edgesmith.compress.rwkvquant.rwkvquant import linear_modules
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model


def tiny(version: int, n_layer: int = 2):
    torch.manual_seed(version)
    m = build_model(RWKVConfig(version=version, n_layer=n_layer, n_embd=64, head_size=16)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m


def weights_of(model) -> dict:
    """Every block linear's (dequantized) weight by name."""
    return {n: m.weight.detach() for n, m in linear_modules(model).items()}
