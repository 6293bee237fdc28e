"""Synthetic graphs with a known causal model, texts made from it, and a frozen tiny text encoder.

Low level to high level, per graph:

1. Latent causal variables per node: topic ``t_i`` in {0, 1, 2} and sentiment ``s_i`` in {0, 1}.
2. Node-level causal variable ``Z_i = [t_i in {0, 1}] and [s_i = 1]`` (an "active" node).
3. Graph label ``Y = min(#edges whose two ends are active, 2)``: 3 classes. This is the high-level
   causal model; ``counterfactual_labels`` evaluates it with ``Z_j`` of one node taken from another
   graph (the interchange intervention on the high-level model).

Text (the stand-in for a node's document): ``text_len`` tokens holding two words of the node's topic,
one word of another topic (a distractor), two words of its sentiment and filler words, shuffled.
Each of the q prompts prepends its own fixed prompt tokens. A frozen, randomly initialised one-block
transformer (``FrozenEncoder``, never trained: the stand-in for the LLM) maps every prompt + text
sequence to token features; ``m_tokens`` of them are sampled per node and prompt (a fixed sample,
drawn once with the data seed), giving the token features the transmission module reads.

Packed model input (one graph): ``(max_nodes, m * d + max_nodes + 1)``, row i = ``[node i's m token
features of the chosen prompt, flattened; adjacency row i; node mask i]``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.gnn_causal.config import DataConfig

N_TOPICS, N_SENT, SYNONYMS, N_FILLER, N_PROMPT_WORDS = 3, 2, 3, 20, 12
TOPIC0, SENT0 = 0, N_TOPICS * SYNONYMS
FILLER0 = SENT0 + N_SENT * SYNONYMS
PROMPT0 = FILLER0 + N_FILLER
VOCAB = PROMPT0 + N_PROMPT_WORDS
TOPIC_WORDS, SENT_WORDS = 3, 3  # per text, besides one distractor topic word and fillers
ACTIVE_TOPICS = (0, 1)
N_CLASSES = 3
ENCODER_SEED = 20250508  # the frozen encoder is the same for every data seed, like a shared pretrained LLM


def active(topic: np.ndarray, sentiment: np.ndarray) -> np.ndarray:
    """The node-level causal variable Z."""
    return (np.isin(topic, ACTIVE_TOPICS) & (sentiment == 1)).astype(np.int64)


def labels_from_z(z: np.ndarray, adj: np.ndarray) -> np.ndarray:
    """High-level causal model: ``min(#edges with both ends active, 2)`` for z (G, N), adj (G, N, N)."""
    edges = np.einsum("gi,gij,gj->g", z, adj, z) / 2
    return np.minimum(np.rint(edges), N_CLASSES - 1).astype(np.int64)


def counterfactual_labels(z_base: np.ndarray, z_source: np.ndarray, adj_base: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Labels of the base graphs with ``Z_j`` (j = ``nodes[g]``) set to its value in the source graphs."""
    z = z_base.copy()
    rows = np.arange(len(z))
    z[rows, nodes] = z_source[rows, nodes]
    return labels_from_z(z, adj_base)


class FrozenEncoder(nn.Module):
    """Token embedding + sinusoidal positions + one pre-norm transformer block, random and frozen."""

    def __init__(self, d: int, max_len: int = 64):
        super().__init__()
        gen = torch.Generator().manual_seed(ENCODER_SEED + d)
        self.emb = nn.Parameter(torch.randn(VOCAB, d, generator=gen), requires_grad=False)
        pos = torch.arange(max_len)[:, None] * torch.exp(torch.arange(0, d, 2) * (-math.log(100.0) / d))[None]
        self.register_buffer("pos", torch.cat([torch.sin(pos), torch.cos(pos)], -1) * 0.5)
        self.wq, self.wk, self.wv, self.w1, self.w2 = (
            nn.Parameter(torch.randn(d, d, generator=gen) / math.sqrt(d), requires_grad=False) for _ in range(5))
        self.norm1, self.norm2 = nn.LayerNorm(d, elementwise_affine=False), nn.LayerNorm(d, elementwise_affine=False)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(S, L) token ids -> (S, L, d) token features."""
        x = self.emb[tokens] + self.pos[: tokens.shape[1]]
        z = self.norm1(x)
        att = torch.softmax((z @ self.wq) @ (z @ self.wk).transpose(1, 2) / math.sqrt(x.shape[-1]), -1)
        x = x + att @ (z @ self.wv)
        return x + torch.relu(self.norm2(x) @ self.w1) @ self.w2


def prompts(cfg: DataConfig) -> list[np.ndarray]:
    """The q fixed prompts (token ids), the same for every data seed."""
    rng = np.random.default_rng(ENCODER_SEED)
    return [PROMPT0 + rng.integers(0, N_PROMPT_WORDS, size=n) for n in cfg.prompt_lengths]


def node_text(topic: int, sentiment: int, length: int, rng: np.random.Generator) -> np.ndarray:
    other = (topic + 1 + rng.integers(0, N_TOPICS - 1)) % N_TOPICS
    words = [TOPIC0 + topic * SYNONYMS + rng.integers(0, SYNONYMS) for _ in range(TOPIC_WORDS)]
    words += [TOPIC0 + other * SYNONYMS + rng.integers(0, SYNONYMS)]
    words += [SENT0 + sentiment * SYNONYMS + rng.integers(0, SYNONYMS) for _ in range(SENT_WORDS)]
    words += list(FILLER0 + rng.integers(0, N_FILLER, size=length - len(words)))
    return rng.permutation(np.array(words, dtype=np.int64))


def random_graph(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random tree plus n // 3 extra edges: connected, a few cycles, average degree about 2.6."""
    a = np.zeros((n, n), np.float32)
    for i in range(1, n):
        j = int(rng.integers(0, i))
        a[i, j] = a[j, i] = 1.0
    for _ in range(n // 3):
        i, j = rng.choice(n, 2, replace=False)
        a[i, j] = a[j, i] = 1.0
    return a


@dataclass
class GraphSet:
    """One split. ``tokens``: (G, N, q, m, d) sampled token features; ``adj`` (G, N, N); ``mask`` (G, N);
    ``topic``, ``sentiment``, ``z`` (G, N) latent and causal variables (padded nodes: z = 0); ``y`` (G,)."""

    tokens: np.ndarray
    adj: np.ndarray
    mask: np.ndarray
    topic: np.ndarray
    sentiment: np.ndarray
    z: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


def make_split(cfg: DataConfig, n_graphs: int, rng: np.random.Generator, encoder: FrozenEncoder) -> GraphSet:
    nmax, q, m, d = cfg.max_nodes, cfg.n_prompts, cfg.m_tokens, cfg.d_token
    adj = np.zeros((n_graphs, nmax, nmax), np.float32)
    mask = np.zeros((n_graphs, nmax), np.float32)
    topic, sentiment = np.zeros((n_graphs, nmax), np.int64), np.zeros((n_graphs, nmax), np.int64)
    texts = []
    for g in range(n_graphs):
        n = int(rng.integers(cfg.min_nodes, nmax + 1))
        adj[g, :n, :n] = random_graph(n, rng)
        mask[g, :n] = 1.0
        topic[g, :n] = rng.integers(0, N_TOPICS, size=n)
        sentiment[g, :n] = rng.integers(0, N_SENT, size=n)
        texts += [(g, i, node_text(topic[g, i], sentiment[g, i], cfg.text_len, rng)) for i in range(n)]
    tokens = np.zeros((n_graphs, nmax, q, m, d), np.float32)
    for p, prompt in enumerate(prompts(cfg)):
        seqs = torch.from_numpy(np.stack([np.concatenate([prompt, t]) for _, _, t in texts]))
        feats = encoder(seqs).numpy()
        pick = np.sort(np.argsort(rng.random(seqs.shape), axis=1)[:, :m], axis=1)  # m distinct positions per node
        gi = np.array([(g, i) for g, i, _ in texts])
        tokens[gi[:, 0], gi[:, 1], p] = np.take_along_axis(feats, pick[..., None], axis=1)
    z = active(topic, sentiment) * mask.astype(np.int64)
    return GraphSet(tokens, adj, mask, topic, sentiment, z, labels_from_z(z, adj))


def load_splits(cfg: DataConfig) -> dict[str, GraphSet]:
    """Train and test splits, deterministic for ``cfg``."""
    encoder = FrozenEncoder(cfg.d_token, max_len=cfg.text_len + max(cfg.prompt_lengths))
    rng_train, rng_test = (np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(2))
    return {"train": make_split(cfg, cfg.n_train, rng_train, encoder),
            "test": make_split(cfg, cfg.n_test, rng_test, encoder)}


def pack(tokens: np.ndarray, adj: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Token features of one prompt (G, N, m, d), adjacency (G, N, N), mask (G, N) -> (G, N, m*d + N + 1)."""
    g, n = mask.shape
    if tokens.ndim != 4 or tokens.shape[:2] != (g, n) or adj.shape != (g, n, n):
        raise EdgesmithError(f"token features {tokens.shape}, adjacency {adj.shape} and mask {mask.shape} disagree.",
                             "pass (G, N, m, d) token features of one prompt, (G, N, N) adjacency and (G, N) mask.")
    return np.ascontiguousarray(np.concatenate([tokens.reshape(g, n, -1), adj, mask[..., None]], -1), dtype=np.float32)


def unpack(packed: torch.Tensor, m: int, d: int, n: int):
    """(B, N, m*d + N + 1) -> tokens (B, N, m, d), adjacency (B, N, N), mask (B, N), for N = ``n``.

    Every size is a Python constant (not read from the input's shape), so the exported graph has
    static shapes and plain Slice/Reshape nodes: a shape-derived index would export as a run-time
    Gather, which TVM's ONNX importer rejects and MAC counting cannot size.
    """
    c = m * d
    tokens = packed[..., :c].reshape(-1, n, m, d)
    return tokens, packed[..., c : c + n], packed[..., c + n : c + n + 1].squeeze(-1)
