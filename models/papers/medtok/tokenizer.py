"""MedTok at small scale: text and graph encoders quantized into one partitioned codebook.

Following the paper and its public code (mims-harvard/MedTok, ``vector_quantization_soft_one_new.py``,
``tokenizer.py``, ``loss.py``), re-written here:

- Text encoder: token embedding + positions, one pre-norm self-attention block, a learned [CLS]
  vector whose output is the sentence feature (the paper uses a frozen BERT; this is a tiny one).
- Graph encoder: 2-layer GCN (H1 = relu(A_hat X W1), H2 = A_hat H1 W2) over the code's ego
  neighbourhood, masked mean pooling (``global_mean_pool`` in the paper).
- One codebook of K vectors (L2-normalised when used), split in thirds: codes [0, K/3) are text-
  specific, [2K/3, K) graph-specific, the middle third shared. Decision: the public code lets the
  shared path search the *whole* codebook; here it searches the middle third only, so the three
  roles are disjoint and codebook usage can be read per role (the partition tests check it).
- Soft top-5 quantisation: the 5 nearest codes under squared distance of normalised vectors,
  weighted by softmax(-distance) (no temperature, as in the public code), and the straight-through
  estimator z + (z_q - z).detach().
- Shared path: two cross-attention layers (text tokens attend to graph nodes and vice versa); the
  text side's [CLS] output and the graph side's masked node mean are quantized in the shared third.
- Losses: VQ ||sg(z) - z_q||^2 + beta * commitment ||z - sg(z_q)||^2 for all four quantisations;
  InfoNCE (temperature 0.07) between shared text and shared graph embeddings, both directions;
  InfoNCE of each specific embedding against the one of an augmented view (text: tokens masked;
  graph: neighbour nodes dropped); orthogonality ||Z_spec^T Z_shared||_F per modality (on
  normalised embeddings, divided by the batch size: a decision, so the weight does not depend on it).

The token of a code is the 4 quantized vectors concatenated (text-specific, graph-specific,
shared-text, shared-graph), with the 4 x 5 codebook indices as its discrete ids.
``TextVQTokenizer`` is the baseline: the same text encoder, one unpartitioned codebook, the same
soft top-5 quantisation, VQ + commitment + InfoNCE against an augmented text view.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.medtok.data import MASK, PAD, OntologyConfig

NEG = -1e4  # additive attention mask; finite so it exports and survives fp16/int8 graphs


@dataclass(frozen=True)
class TokenizerConfig:
    """Widths, codebook size (a multiple of 3), top-k, loss weights."""

    d_model: int = 32
    code_dim: int = 16
    codebook_size: int = 96
    top_k: int = 5
    beta: float = 0.25
    w_shared: float = 1.0
    w_specific: float = 1.0
    w_orth: float = 0.1
    temperature: float = 0.07

    def __post_init__(self):
        if self.codebook_size % 3 or self.codebook_size // 3 < self.top_k:
            raise EdgesmithError(f"codebook_size {self.codebook_size} is not 3 parts of at least top_k={self.top_k} codes.",
                                 "use a multiple of 3 with codebook_size / 3 >= top_k (96 is the default).")
        for name in ("d_model", "code_dim", "top_k"):
            if int(getattr(self, name)) < 1:
                raise EdgesmithError(f"TokenizerConfig.{name} must be positive.", f"set {name} to 1 or more.")


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """x / ||x|| along the last axis, written without F.normalize: its clamp + Expand pattern stops
    onnxruntime's symbolic shape inference, which the deploy step needs to count MACs."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-12)


def soft_topk_quantize(z: torch.Tensor, codebook: torch.Tensor, k: int, offset: int = 0):
    """Soft top-k quantisation of z against (normalised) ``codebook`` rows.

    Returns (z_q with the straight-through estimator, z_q without it, indices (+ ``offset``) (B, k),
    weights (B, k) summing to 1, z normalised). Distances are squared Euclidean between L2-normalised
    vectors; weights softmax(-distance) over the k nearest.
    """
    zn = l2norm(z)
    cb = l2norm(codebook)
    d = (zn * zn).sum(-1, keepdim=True) + (cb * cb).sum(-1)[None, :] - 2.0 * torch.matmul(zn, cb.t())
    neg_vals, idx = torch.topk(-d, k, dim=-1)
    w = torch.softmax(neg_vals, dim=-1)
    zq = (w.unsqueeze(-1) * cb[idx]).sum(1)
    return zn + (zq - zn).detach(), zq, idx + offset, w, zn


def info_nce(q: torch.Tensor, k: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE with the other rows of the batch as negatives (cross-entropy on cosine similarities)."""
    logits = torch.matmul(l2norm(q), l2norm(k).t()) / temperature
    return F.cross_entropy(logits, torch.arange(len(q)))


def vq_losses(z: torch.Tensor, zq: torch.Tensor, beta: float) -> torch.Tensor:
    """Codebook loss (codes move to encodings) + beta * commitment (encodings move to codes)."""
    return F.mse_loss(zq, z.detach()) + beta * F.mse_loss(z, zq.detach())


def orthogonality(spec: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """||Z_spec^T Z_shared||_F over normalised rows, divided by the batch size."""
    return torch.linalg.matrix_norm(torch.matmul(l2norm(spec).t(), l2norm(shared))) / len(spec)


class AttentionBlock(nn.Module):
    """Pre-norm single-head attention + MLP, written with matmuls (exports to plain ONNX ops)."""

    def __init__(self, d: int):
        super().__init__()
        self.ln_q, self.ln_kv, self.ln_f = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.scale = d**-0.5

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, ctx_mask: torch.Tensor) -> torch.Tensor:
        """x (B, Lq, d) attends to ctx (B, Lk, d); ctx_mask (B, Lk) is 1 for real positions."""
        q = self.q(self.ln_q(x))
        c = self.ln_kv(ctx)
        att = torch.matmul(q, self.k(c).transpose(1, 2)) * self.scale + (1.0 - ctx_mask)[:, None, :] * NEG
        x = x + self.o(torch.matmul(torch.softmax(att, dim=-1), self.v(c)))
        return x + self.ff(self.ln_f(x))


class TextEncoder(nn.Module):
    """Token ids (B, L) -> token states (B, 1 + L, d) with [CLS] first, and the mask (B, 1 + L)."""

    def __init__(self, vocab: int, length: int, d: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1 + length, d) * 0.02)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.block = AttentionBlock(d)
        self.ln = nn.LayerNorm(d)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.cat([torch.ones_like(ids[:, :1], dtype=torch.float32), (ids != PAD).float()], dim=1)
        e = self.emb(ids)
        # [CLS] broadcast by an add, not Expand: onnxruntime's symbolic shape inference (used to count
        # MACs of deployed graphs) cannot merge the dynamic dims of an Expand fed by a Shape
        x = torch.cat([self.cls + torch.zeros_like(e[:, :1]), e], dim=1) + self.pos
        h = self.ln(self.block(x, x, mask))
        return h, mask


class GraphEncoder(nn.Module):
    """2-layer GCN on a dense normalised adjacency; returns node states (B, G, d) (padded rows zeroed)."""

    def __init__(self, node_dim: int, d: int):
        super().__init__()
        self.w1, self.w2 = nn.Linear(node_dim, d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.matmul(adj, self.w1(x)))
        return torch.matmul(adj, self.w2(h)) * mask.unsqueeze(-1)


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp_min(1.0)


def unpack_codes(x: torch.Tensor, ocfg: OntologyConfig):
    """(N, per_code) packed rows -> ids (N, L) long, node features (N, G, F), adjacency (N, G, G), mask (N, G)."""
    g, f, lt = ocfg.n_graph_nodes, ocfg.node_dim, ocfg.desc_len
    ids = x[:, :lt].round().long()
    o = lt
    feats = x[:, o : o + g * f].reshape(-1, g, f)
    o += g * f
    adj = x[:, o : o + g * g].reshape(-1, g, g)
    o += g * g
    return ids, feats, adj, x[:, o : o + g]


class MedTokTokenizer(nn.Module):
    """The multimodal tokenizer; ``forward(packed codes)`` returns embeddings, ids and weights."""

    PATHS = ("text_specific", "graph_specific", "shared_text", "shared_graph")

    def __init__(self, ocfg: OntologyConfig, cfg: TokenizerConfig):
        super().__init__()
        self.ocfg, self.cfg = ocfg, cfg
        d = cfg.d_model
        self.text = TextEncoder(ocfg.vocab_size, ocfg.desc_len, d)
        self.graph = GraphEncoder(ocfg.node_dim, d)
        self.cross_t = nn.ModuleList([AttentionBlock(d) for _ in range(2)])  # text queries, graph keys
        self.cross_g = nn.ModuleList([AttentionBlock(d) for _ in range(2)])  # graph queries, text keys
        self.proj = nn.ModuleDict({p: nn.Linear(d, cfg.code_dim) for p in self.PATHS})
        self.codebook = nn.Parameter(torch.randn(cfg.codebook_size, cfg.code_dim))

    @property
    def out_dim(self) -> int:
        return 4 * self.cfg.code_dim

    def region(self, path: str) -> tuple[int, int]:
        """[start, stop) of the codebook rows a path may use."""
        third = self.cfg.codebook_size // 3
        return {"text_specific": (0, third), "shared_text": (third, 2 * third), "shared_graph": (third, 2 * third),
                "graph_specific": (2 * third, 3 * third)}[path]

    def encode(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Pre-quantisation embeddings of the four paths for packed code rows."""
        ids, feats, adj, gmask = unpack_codes(x, self.ocfg)
        th, tmask = self.text(ids)
        gh = self.graph(feats, adj, gmask)
        t_att, g_att = th, gh
        for blk in self.cross_t:
            t_att = blk(t_att, gh, gmask)
        for blk in self.cross_g:
            g_att = blk(g_att, th, tmask)
        return {"text_specific": self.proj["text_specific"](th[:, 0]),
                "graph_specific": self.proj["graph_specific"](masked_mean(gh, gmask)),
                "shared_text": self.proj["shared_text"](t_att[:, 0]),
                "shared_graph": self.proj["shared_graph"](masked_mean(g_att, gmask))}

    def quantize(self, z: dict[str, torch.Tensor]) -> dict[str, tuple]:
        out = {}
        for p in self.PATHS:
            lo, hi = self.region(p)
            out[p] = soft_topk_quantize(z[p], self.codebook[lo:hi], self.cfg.top_k, offset=lo)
        return out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(N, per_code) -> token embedding (N, 4 * code_dim), ids (N, 4, k) long, weights (N, 4, k)."""
        q = self.quantize(self.encode(x))
        emb = torch.cat([q[p][0] for p in self.PATHS], dim=-1)
        ids = torch.stack([q[p][2] for p in self.PATHS], dim=1)
        w = torch.stack([q[p][3] for p in self.PATHS], dim=1)
        return emb, ids, w

    def loss(self, x: torch.Tensor, x_aug: torch.Tensor) -> tuple[torch.Tensor, dict]:
        c = self.cfg
        z, z_aug = self.encode(x), self.encode(x_aug)
        q, q_aug = self.quantize(z), self.quantize(z_aug)
        vq = sum(vq_losses(q[p][4], q[p][1], c.beta) for p in self.PATHS)
        st, sg = q["shared_text"][0], q["shared_graph"][0]
        shared = 0.5 * (info_nce(st, sg, c.temperature) + info_nce(sg, st, c.temperature))
        specific = info_nce(q["text_specific"][0], q_aug["text_specific"][0], c.temperature) + \
            info_nce(q["graph_specific"][0], q_aug["graph_specific"][0], c.temperature)
        orth = orthogonality(q["text_specific"][0], st) + orthogonality(q["graph_specific"][0], sg)
        total = vq + c.w_shared * shared + c.w_specific * specific + c.w_orth * orth
        return total, {"vq": vq.item(), "shared": shared.item(), "specific": specific.item(), "orth": orth.item()}


class TextVQTokenizer(nn.Module):
    """Baseline: text encoder -> one codebook (no partition), same soft top-k quantisation."""

    PATHS = ("text",)

    def __init__(self, ocfg: OntologyConfig, cfg: TokenizerConfig):
        super().__init__()
        self.ocfg, self.cfg = ocfg, cfg
        self.text = TextEncoder(ocfg.vocab_size, ocfg.desc_len, cfg.d_model)
        # as wide as MedTok's 4-part token, so the downstream head gets the same input width
        self.proj = nn.Linear(cfg.d_model, 4 * cfg.code_dim)
        self.codebook = nn.Parameter(torch.randn(cfg.codebook_size, 4 * cfg.code_dim))

    @property
    def out_dim(self) -> int:
        return 4 * self.cfg.code_dim

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        ids = x[:, : self.ocfg.desc_len].round().long()
        return self.proj(self.text(ids)[0][:, 0])

    def forward(self, x: torch.Tensor):
        zq_st, _, idx, w, _ = soft_topk_quantize(self.encode(x), self.codebook, self.cfg.top_k)
        return zq_st, idx.unsqueeze(1), w.unsqueeze(1)

    def loss(self, x: torch.Tensor, x_aug: torch.Tensor) -> tuple[torch.Tensor, dict]:
        c = self.cfg
        st, zq, _, _, zn = soft_topk_quantize(self.encode(x), self.codebook, c.top_k)
        st_aug = soft_topk_quantize(self.encode(x_aug), self.codebook, c.top_k)[0]
        vq = vq_losses(zn, zq, c.beta)
        specific = info_nce(st, st_aug, c.temperature)
        return vq + c.w_specific * specific, {"vq": vq.item(), "specific": specific.item()}


def augment(x: torch.Tensor, ocfg: OntologyConfig, gen: torch.Generator, p_token: float = 0.3,
            p_node: float = 0.3) -> torch.Tensor:
    """An augmented view of packed code rows: text tokens masked, non-centre neighbour nodes dropped.

    Dropping a node zeroes its features and mask and renormalises nothing (the GCN sees fewer
    neighbours); the code itself (node 0) is always kept.
    """
    g, f, lt = ocfg.n_graph_nodes, ocfg.node_dim, ocfg.desc_len
    x = x.clone()
    ids = x[:, :lt]
    drop_t = (torch.rand(ids.shape, generator=gen) < p_token) & (ids != PAD)
    x[:, :lt] = torch.where(drop_t, torch.full_like(ids, float(MASK)), ids)
    keep = (torch.rand((len(x), g), generator=gen) >= p_node).float()
    keep[:, 0] = 1.0
    o = lt
    feats = x[:, o : o + g * f].reshape(-1, g, f) * keep.unsqueeze(-1)
    x[:, o : o + g * f] = feats.reshape(len(x), -1)
    o += g * f
    adj = x[:, o : o + g * g].reshape(-1, g, g) * keep[:, :, None] * keep[:, None, :]
    x[:, o : o + g * g] = adj.reshape(len(x), -1)
    o += g * g
    x[:, o : o + g] = x[:, o : o + g] * keep
    return x
