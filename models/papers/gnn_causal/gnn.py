"""The attention-based transmission module, the GNN, and interchange interventions on its representations.

Transmission (from secondary notes on the paper; its code is not public): the token features of a
node (q prompts x m sampled tokens, or m tokens of the chosen prompt) go through one pre-norm
Transformer encoder block. Its attention logits ``A = Q K^T / sqrt(d)`` give each token a score,
the mean attention it receives (``mean_i A[i, t]``); a softmax over all the node's tokens turns the
scores into weights, and the node feature is the weighted mean of the block's output tokens. The
logits before the row softmax are used: after it every row sums to one, so mean received attention
would sit near ``1/T`` for every token and its softmax would be almost uniform.

GNN: ``layers`` message-passing layers ``h' = relu(h W_self + (A h) W_nbr + b)`` (sum aggregation with
a separate self weight, as PyG's GraphConv: the label multiplies a node's own causal variable by its
neighbours', which a shared self/neighbour weight cannot separate), then a sum over the graph's nodes
and a two-layer MLP to the class logits.

Representations are numbered by layer: 0 is the node features out of the transmission module (or
the mean), k = 1..layers the output of message-passing layer k. An interchange intervention at a
``Site(layer, channels)`` on node j replaces those channels of node j's layer representation in the
base run by their values in a source run, and lets the base run continue from there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from edgesmith.models.papers.gnn_causal.config import ModelConfig
from edgesmith.models.papers.gnn_causal.data import unpack


@dataclass(frozen=True)
class Site:
    """Where to intervene: a layer (0 = node features) and a channel range ``[start, stop)`` (None: all)."""

    layer: int
    start: int = 0
    stop: int | None = None

    def label(self, width: int) -> str:
        stop = width if self.stop is None else self.stop
        return f"L{self.layer}[{self.start}:{stop}]"


class TransmissionModule(nn.Module):
    """Attention-weighted mean of a node's token features (weights: softmax of mean received attention)."""

    def __init__(self, d: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, T, d) -> node features (B, N, d) and token weights (B, N, T), each row summing to 1."""
        z = self.norm1(tokens)
        logits = torch.matmul(self.q(z), self.k(z).transpose(-1, -2)) * self.scale  # A = Q K^T, (B, N, T, T)
        weights = torch.softmax(logits.mean(-2), -1)  # mean attention each token receives, softmax over tokens
        x = tokens + self.o(torch.matmul(torch.softmax(logits, -1), self.v(z)))
        x = x + self.ffn(self.norm2(x))
        return (weights[..., None] * x).sum(-2), weights


class MeanMLP(nn.Module):
    """Control: the plain token mean, then the transmission module's residual feed-forward block."""

    def __init__(self, d: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, None]:
        x = tokens.mean(-2)
        return x + self.ffn(self.norm(x)), None


class CausalGNN(nn.Module):
    """Token features -> node features -> message passing -> graph class logits.

    ``forward(packed)`` is the deployed path (token features of the chosen prompt + adjacency + mask in
    one tensor); ``run`` is the analysis path with optional intervention and the per-layer representations.
    """

    def __init__(self, cfg: ModelConfig, m_tokens: int, max_nodes: int):
        super().__init__()
        self.cfg, self.m_tokens, self.max_nodes = cfg, m_tokens, max_nodes
        self.transmission = {"attention": TransmissionModule, "mean-mlp": MeanMLP}.get(cfg.transmission, lambda d: None)(
            cfg.d_token)
        widths = [cfg.d_token] + [cfg.hidden] * cfg.layers
        self.self_w = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.nbr_w = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(widths[:-1], widths[1:]))
        self.readout = nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.n_classes))
        self.widths = widths
        # the prompt fixed after the warm-up (-1: not chosen yet, all prompts read); saved with the weights
        self.register_buffer("prompt", torch.tensor(-1, dtype=torch.int64))

    def node_features(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.transmission is None:
            return tokens.mean(-2), None
        return self.transmission(tokens)

    @property
    def chooses_prompt(self) -> bool:
        """Only the attention module weighs tokens across prompts, so only it takes part in the warm-up."""
        return isinstance(self.transmission, TransmissionModule)

    def run(self, tokens, adj, mask, site: Site | None = None, nodes: torch.Tensor | None = None,
            source: list[torch.Tensor] | None = None):
        """Logits (B, C), representations per layer (list of (B, N, width)) and token weights (or None).

        With ``site``, node ``nodes[b]`` of sample b gets the site's channels from ``source[site.layer]``.
        """
        h, weights = self.node_features(tokens)
        h = h * mask[..., None]
        reps = []
        for layer in range(self.cfg.layers + 1):
            if layer > 0:
                lin_s, lin_n = self.self_w[layer - 1], self.nbr_w[layer - 1]
                h = torch.relu(lin_s(h) + lin_n(torch.matmul(adj, h))) * mask[..., None]
            if site is not None and site.layer == layer:
                h = swap(h, source[layer], nodes, site)
            reps.append(h)
        return self.readout(h.sum(1)), reps, weights

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        tokens, adj, mask = unpack(packed, self.m_tokens, self.cfg.d_token, self.max_nodes)
        return self.run(tokens, adj, mask)[0]


def swap(base: torch.Tensor, source: torch.Tensor, nodes: torch.Tensor, site: Site) -> torch.Tensor:
    """``base`` with channels ``site.start:site.stop`` of node ``nodes[b]`` taken from ``source``.

    A 0/1 selector keeps every other entry bit-for-bit (x * 1 + y * 0 == x for finite y).
    """
    b, n, c = base.shape
    node_sel = torch.nn.functional.one_hot(nodes, n).to(base.dtype)  # (B, N)
    chan_sel = torch.zeros(c, dtype=base.dtype)
    chan_sel[site.start : c if site.stop is None else site.stop] = 1.0
    sel = node_sel[:, :, None] * chan_sel[None, None, :]
    return base * (1.0 - sel) + source * sel


def interchange(model: CausalGNN, base: tuple, source: tuple, site: Site, nodes: torch.Tensor):
    """Run ``source`` (tokens, adj, mask), then ``base`` with the site of node ``nodes[b]`` from the source run.

    Returns the intervened logits and representations.
    """
    _, src_reps, _ = model.run(*source)
    logits, reps, _ = model.run(*base, site=site, nodes=nodes, source=src_reps)
    return logits, reps
