"""Fixtures for the RWKV model tests: small models with perturbed (non-trivial) parameters."""
from __future__ import annotations

import pytest
import torch

from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model


def random_model(version: int, seed: int = 0, n_layer: int = 2, n_embd: int = 64, head_size: int = 16):
    """A small model with every parameter perturbed, so LoRAs and decays are not at their trivial init."""
    torch.manual_seed(seed)
    m = build_model(RWKVConfig(version=version, n_layer=n_layer, n_embd=n_embd, head_size=head_size)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


@pytest.fixture
def random_rwkv():
    return random_model
