"""Training of a tokenizer (self-supervised, on the ontology's codes) and of the downstream EHR head.

Stage 1 trains MedTok (or the text-only baseline) on all codes with its own losses; no labels.
Stage 2 freezes the tokenizer and trains a DeepSets head on training patients (the tokens of their
codes: per-code MLP, sum over the visit, MLP, one logit). ``PatientModel`` chains both for export:
packed patient -> [logit, the codebook ids of every code and path, as floats].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgesmith.models.papers.medtok.data import Ontology
from edgesmith.models.papers.medtok.tokenizer import augment


@dataclass(frozen=True)
class TrainConfig:
    """Stage 1 (tokenizer) and stage 2 (head) settings."""

    tok_steps: int = 200
    tok_batch: int = 64
    tok_lr: float = 3e-3
    head_epochs: int = 30
    head_batch: int = 128
    head_lr: float = 3e-3
    head_hidden: int = 64
    seed: int = 0


class DeepSetsHead(nn.Module):
    """Code tokens (B, L, D) -> one logit per patient: rho(sum_t phi(token_t))."""

    def __init__(self, d_in: int, hidden: int):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.rho = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.rho(self.phi(tokens).sum(1))


class PatientModel(nn.Module):
    """Packed patient (B, L * per_code) -> (B, 1 + L * paths * k): logit, then codebook ids as floats."""

    def __init__(self, tokenizer: nn.Module, head: DeepSetsHead, seq_len: int, per_code: int):
        super().__init__()
        self.tokenizer, self.head = tokenizer, head
        self.seq_len, self.per_code = seq_len, per_code

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes = x.reshape(-1, self.per_code)
        emb, ids, _ = self.tokenizer(codes)
        logit = self.head(emb.reshape(-1, self.seq_len, emb.shape[-1]))
        return torch.cat([logit, ids.reshape(logit.shape[0], -1).float()], dim=1)


def _one_thread(fn):
    def wrapped(*a, **kw):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # deterministic for the seed and leaves the other cores alone
        try:
            return fn(*a, **kw)
        finally:
            torch.set_num_threads(threads)

    return wrapped


@_one_thread
def train_tokenizer(tok: nn.Module, onto: Ontology, cfg: TrainConfig) -> list[dict]:
    """Self-supervised stage: minibatches of codes and an augmented view of each; Adam; eval mode after."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    x = torch.from_numpy(onto.code_inputs())
    opt = torch.optim.Adam(tok.parameters(), lr=cfg.tok_lr)
    log = []
    tok.train()
    for _ in range(cfg.tok_steps):
        idx = torch.randperm(len(x), generator=gen)[: cfg.tok_batch]
        xb = x[idx]
        loss, parts = tok.loss(xb, augment(xb, onto.cfg, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.append({"loss": loss.item(), **parts})
    tok.eval()
    return log


@torch.no_grad()
def code_tokens(tok: nn.Module, onto: Ontology) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token embedding (n_codes, D), ids (n_codes, paths, k), weights of every code of the ontology."""
    emb, ids, w = tok(torch.from_numpy(onto.code_inputs()))
    return emb.numpy(), ids.numpy(), w.numpy()


@_one_thread
def train_head(head: DeepSetsHead, code_emb: np.ndarray, codes: np.ndarray, y: np.ndarray, cfg: TrainConfig) -> list[float]:
    """Stage 2 on frozen tokens: BCE with logits, Adam, shuffled minibatches."""
    torch.manual_seed(cfg.seed + 1)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    emb = torch.from_numpy(code_emb)
    c = torch.from_numpy(codes)
    yt = torch.from_numpy(y.astype(np.float32))
    opt = torch.optim.Adam(head.parameters(), lr=cfg.head_lr)
    losses = []
    head.train()
    for _ in range(cfg.head_epochs):
        perm = torch.randperm(len(c), generator=gen)
        for i in range(0, len(c), cfg.head_batch):
            b = perm[i : i + cfg.head_batch]
            loss = nn.functional.binary_cross_entropy_with_logits(head(emb[c[b]]).squeeze(1), yt[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    head.eval()
    return losses


def auprc(y: np.ndarray, score: np.ndarray) -> float:
    """Average precision (area under the precision-recall curve), as scikit-learn computes it."""
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(y, score))


def codebook_usage(ids: np.ndarray, start: int, stop: int) -> dict:
    """Usage of codebook rows [start, stop) by the top-1 assignments ``ids`` (any shape):
    fraction of those rows used at least once, and the perplexity exp(H) of the assignment histogram."""
    ids = np.asarray(ids).ravel()
    counts = np.bincount(ids - start, minlength=stop - start)[: stop - start].astype(np.float64)
    p = counts / max(counts.sum(), 1.0)
    nz = p[p > 0]
    return {"fraction_used": float((counts > 0).mean()), "perplexity": float(np.exp(-(nz * np.log(nz)).sum()))}
