"""TSV, the truthfulness separator vector (Park et al., ICML 2025; official code deeplearning-wisc/tsv),
on an RWKV-7 language model.

- Steering: ``lam * v`` is added to the residual stream after block ``layer``, at every position.
  The model's weights stay frozen; ``v`` (init 0, so training starts from the unsteered model) is
  the only trained parameter.
- Embedding: ``r = normalize(ln_out(h_last))``, the last token's final hidden state (the HF
  ``hidden_states[-1]`` the official code reads is also after the final norm).
- Head: ``p(c | r) = softmax(kappa * mu_c^T r)`` with unit prototypes ``mu_c`` (c = 0 hallucinated,
  1 truthful) kept as an exponential moving average of normalised class means (decay ``ema``).
- Stage 1: cross-entropy on the labelled exemplars (hard labels).
- Stage 2: Sinkhorn optimal transport assigns soft pseudo-labels to unlabelled responses under the
  class prior (the exemplars' class shares, as in the official code), the ``n_selected`` most
  confident (lowest cross-entropy to their pseudo-label, per class in proportion to the prior) join
  the exemplars, and training continues on the union with soft labels.

Choices, from the official code (``tsv_main.py``, ``train_utils.py``): lam 5, kappa 10 (cosine
temperature 0.1), EMA decay 0.99, AdamW lr 5e-3, 20 + 20 epochs, Sinkhorn epsilon 0.05; the
Sinkhorn input is the cosine similarity to the prototypes. Where we differ, and why: prototypes
start from the exemplars' class means instead of random unit vectors (with 32 exemplars the EMA
would otherwise stay dominated by its random start); Sinkhorn runs to convergence (``sk_iters``
50, the official code stops after 3) so the class-prior marginal the paper states actually holds;
the reported AUROC is the final epoch's, never the best test epoch. With two RWKV blocks, "one
layer" is the residual stream after block 0, the only point with a block after it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ood.config import Config


@dataclass(frozen=True)
class TSVConfig(Config):
    layer: int = 0
    lam: float = 5.0
    kappa: float = 10.0
    ema: float = 0.99
    lr: float = 5e-3
    init_epochs: int = 20
    aug_epochs: int = 20
    batch: int = 32
    n_selected: int = 128
    sk_epsilon: float = 0.05
    sk_iters: int = 50

    def validate(self) -> None:
        self._need_int("layer", 0, 64)
        for name in ("init_epochs", "aug_epochs", "batch", "n_selected", "sk_iters"):
            self._need_int(name, 0 if name in ("aug_epochs", "n_selected") else 1)
        self._need_float("lam", 0.0, open_lo=False)
        self._need_float("kappa", 0.0)
        self._need_float("ema", 0.0, 1.0, open_lo=False)
        self._need_float("lr", 0.0, 1.0)
        self._need_float("sk_epsilon", 0.0)


# --- the steered model ---------------------------------------------------------------------------

class SteeredRWKV(nn.Module):
    """An RWKV-6/7 model (frozen) with ``lam * v`` added after block ``layer``; returns unit embeddings.

    ``prefix`` runs the blocks up to and including ``layer`` (independent of ``v``, so training can
    cache it); ``suffix`` adds the steering and runs the rest plus ``ln_out``.
    """

    def __init__(self, model: nn.Module, layer: int, lam: float):
        super().__init__()
        if not 0 <= layer < model.cfg.n_layer - 1:
            raise EdgesmithError(f"steering layer {layer} has no block after it in a {model.cfg.n_layer}-layer model.",
                                 f"pick a layer from 0 to {model.cfg.n_layer - 2}.")
        self.model = model
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.layer = layer
        self.lam = float(lam)
        self.v = nn.Parameter(torch.zeros(model.cfg.n_embd))

    def _block(self, i: int, x, carry, state):
        blk = self.model.blocks[i]
        if i == 0:
            x = blk.ln0(x)
        dx, _, _, carry = self.model._time_mix(blk.att, blk.ln1(x), state.att_x[i], state.wkv[i], False, carry)
        x = x + dx
        dx, _ = blk.ffn(blk.ln2(x), state.ffn_x[i])
        return x + dx, carry

    def residuals(self, tokens: torch.Tensor, steer: bool = True) -> list[torch.Tensor]:
        """Residual stream after every block (the steering, if on, included after block ``layer``)."""
        x = self.model.emb(tokens)
        state = self.model.zero_state(tokens.shape[0])
        carry, out = None, []
        for i in range(self.model.cfg.n_layer):
            x, carry = self._block(i, x, carry, state)
            if steer and i == self.layer:
                x = x + self.lam * self.v
            out.append(x)
        return out

    def prefix(self, tokens: torch.Tensor):
        x = self.model.emb(tokens)
        state = self.model.zero_state(tokens.shape[0])
        carry = None
        for i in range(self.layer + 1):
            x, carry = self._block(i, x, carry, state)
        return x, carry

    def suffix(self, x, carry, steer: bool = True) -> torch.Tensor:
        if steer:
            x = x + self.lam * self.v
        state = self.model.zero_state(x.shape[0])
        for i in range(self.layer + 1, self.model.cfg.n_layer):
            x, carry = self._block(i, x, carry, state)
        return F.normalize(self.model.ln_out(x[:, -1]), dim=-1)

    def forward(self, tokens: torch.Tensor, steer: bool = True) -> torch.Tensor:
        x, carry = self.prefix(tokens)
        return self.suffix(x, carry, steer)


def class_probs(r: torch.Tensor, prototypes: torch.Tensor, kappa: float) -> torch.Tensor:
    """softmax(kappa * mu_c^T r) over the classes; rows of ``r`` and ``prototypes`` are unit vectors."""
    return torch.softmax(kappa * r @ F.normalize(prototypes, dim=-1).T, dim=-1)


def ema_update(prototypes: torch.Tensor, r: torch.Tensor, labels: torch.Tensor, decay: float) -> torch.Tensor:
    """mu <- normalize(decay * mu + (1 - decay) * (label-weighted mean of r)); ``labels`` (N, C) soft or hard."""
    w = labels.float()
    mean = (w.T @ F.normalize(r, dim=-1)) / (w.sum(0)[:, None] + 1e-8)
    present = w.sum(0)[:, None] > 0  # a class absent from the batch keeps its prototype
    new = torch.where(present, decay * prototypes + (1 - decay) * mean, prototypes)
    return F.normalize(new, dim=-1)


# --- optimal transport pseudo-labels --------------------------------------------------------------

def sinkhorn(scores: torch.Tensor, prior: torch.Tensor, epsilon: float = 0.05, n_iters: int = 50) -> torch.Tensor:
    """Entropic OT between N samples (uniform mass) and C classes (mass ``prior``): the soft assignment.

    Returns Q (N, C) with every row summing to 1 and column c summing to N * prior[c] (to within the
    iterations' convergence). Computed in the log domain, so small epsilons do not overflow.
    """
    s = torch.as_tensor(scores, dtype=torch.float64)
    p = torch.as_tensor(prior, dtype=torch.float64).ravel()
    if s.ndim != 2 or s.shape[1] != p.numel():
        raise EdgesmithError(f"Sinkhorn got scores {tuple(s.shape)} and a prior of {p.numel()} classes.",
                             "pass scores (samples, classes) and one prior weight per class.")
    if bool((p <= 0).any()) or not torch.isfinite(s).all():
        raise EdgesmithError("Sinkhorn needs a positive prior for every class and finite scores.",
                             "estimate the prior from labelled exemplars of every class.")
    n = s.shape[0]
    log_q = s / epsilon
    log_r, log_c = torch.log(p / p.sum()), torch.full((n,), -np.log(n), dtype=torch.float64)
    for _ in range(n_iters):
        log_q = log_q - torch.logsumexp(log_q, dim=0, keepdim=True) + log_r[None, :]  # class marginals
        log_q = log_q - torch.logsumexp(log_q, dim=1, keepdim=True) + log_c[:, None]  # sample marginals
    return (log_q.exp() * n).to(torch.float32)


def select_confident(q: torch.Tensor, probs: torch.Tensor, k: int, prior: torch.Tensor) -> torch.Tensor:
    """Indices of the ``k`` pseudo-labelled samples whose predictions agree best with their OT labels
    (lowest cross-entropy), ``k * prior[c]`` from each class by predicted class (official rule; if a
    class has too few members, the overall ``k`` best)."""
    ce = -(q * torch.log(probs + 1e-8)).sum(1)
    hard = probs.argmax(1)
    counts = [int(k * float(pc)) for pc in prior]
    members = [torch.nonzero(hard == c).ravel() for c in range(q.shape[1])]
    if any(len(m) < n for m, n in zip(members, counts)):
        return torch.topk(ce, min(k, len(ce)), largest=False).indices
    picks = [m[torch.topk(ce[m], n, largest=False).indices] for m, n in zip(members, counts) if n > 0]
    return torch.cat(picks) if picks else torch.zeros(0, dtype=torch.long)


# --- training --------------------------------------------------------------------------------------

@dataclass
class TSVResult:
    steered: SteeredRWKV
    prototypes: torch.Tensor
    history: dict


def _embed_cached(steered: SteeredRWKV, tokens: np.ndarray, batch: int = 64):
    """Block outputs up to the steering layer for every row (no gradient: they do not depend on v)."""
    xs, cs = [], []
    with torch.no_grad():
        for i in range(0, len(tokens), batch):
            x, c = steered.prefix(torch.as_tensor(tokens[i:i + batch]))
            xs.append(x), cs.append(c)
    carry = None if cs[0] is None else torch.cat(cs)
    return torch.cat(xs), carry


def _take(cache, idx):
    x, c = cache
    return x[idx], (None if c is None else c[idx])


def embed(steered: SteeredRWKV, tokens: np.ndarray, steer: bool = True, batch: int = 64) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([steered(torch.as_tensor(tokens[i:i + batch]), steer) for i in range(0, len(tokens), batch)])


def _epochs(steered, opt, cache, labels: torch.Tensor, prototypes, cfg: TSVConfig, epochs: int,
            gen: torch.Generator, hard: bool, losses: list) -> torch.Tensor:
    n = len(labels)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, cfg.batch):
            idx = perm[i:i + cfg.batch]
            x, c = _take(cache, idx)
            r = steered.suffix(x, c)
            y = labels[idx]
            loss = -(y * torch.log(class_probs(r, prototypes, cfg.kappa) + 1e-8)).sum(1).mean()
            with torch.no_grad():
                prototypes = ema_update(prototypes, r.detach(),
                                        F.one_hot(y.argmax(1), y.shape[1]) if hard else y, cfg.ema)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return prototypes


def train_tsv(model: nn.Module, exemplars: np.ndarray, exemplar_labels: np.ndarray, wild: np.ndarray | None,
              cfg: TSVConfig, seed: int = 0) -> TSVResult:
    """Both stages of TSV (stage 2 skipped when ``wild`` is None or ``cfg.n_selected`` is 0).

    ``model`` is copied (the caller's stays untouched); labels: 1 truthful, 0 hallucinated.
    """
    y = np.asarray(exemplar_labels).ravel()
    if len(y) != len(exemplars) or set(np.unique(y)) != {0, 1}:
        raise EdgesmithError("TSV needs labelled exemplars of both classes (0 hallucinated, 1 truthful).",
                             "draw exemplars that include truthful and hallucinated responses.")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    steered = SteeredRWKV(copy.deepcopy(model).eval(), cfg.layer, cfg.lam)
    opt = torch.optim.AdamW([steered.v], lr=cfg.lr)
    cache = _embed_cached(steered, exemplars)
    labels = F.one_hot(torch.as_tensor(y), 2).float()
    with torch.no_grad():
        r0 = steered.suffix(*cache)
    prototypes = F.normalize(labels.T @ r0 / labels.sum(0)[:, None], dim=-1)
    prior = labels.mean(0)
    history: dict = {"stage1_loss": [], "stage2_loss": []}
    prototypes = _epochs(steered, opt, cache, labels, prototypes, cfg, cfg.init_epochs, gen, True,
                         history["stage1_loss"])
    if wild is not None and cfg.n_selected > 0 and cfg.aug_epochs > 0:
        wild_cache = _embed_cached(steered, wild)
        with torch.no_grad():
            r = steered.suffix(*wild_cache)
            sims = r @ F.normalize(prototypes, dim=-1).T
            q = sinkhorn(sims, prior, cfg.sk_epsilon, cfg.sk_iters)
            chosen = select_confident(q, class_probs(r, prototypes, cfg.kappa), min(cfg.n_selected, len(wild)), prior)
        history["n_selected"] = int(len(chosen))
        history["selected"] = chosen.tolist()
        history["selected_pseudo_labels"] = q[chosen].argmax(1).tolist()
        history["pseudo_label_counts"] = [int((q[chosen].argmax(1) == c).sum()) for c in range(2)]
        aug = (torch.cat([wild_cache[0][chosen], cache[0]]),
               None if cache[1] is None else torch.cat([wild_cache[1][chosen], cache[1]]))
        prototypes = _epochs(steered, opt, aug, torch.cat([q[chosen], labels]), prototypes, cfg, cfg.aug_epochs,
                             gen, False, history["stage2_loss"])
    steered.eval()
    return TSVResult(steered, prototypes.detach(), history)


def truth_scores(steered: SteeredRWKV, prototypes: torch.Tensor, tokens: np.ndarray, kappa: float,
                 steer: bool = True) -> np.ndarray:
    """p(truthful | response) for every row of ``tokens``."""
    r = embed(steered, tokens, steer)
    return class_probs(r, prototypes, kappa)[:, 1].numpy()


class TSVDetector(nn.Module):
    """The exportable detector: packed byte tokens as float32 (B, T) -> p(truthful) (B, 1).

    One graph: token ids (cast to int64) -> frozen RWKV with the steering -> normalised last-token
    state -> prototype head.
    """

    def __init__(self, steered: SteeredRWKV, prototypes: torch.Tensor, kappa: float):
        super().__init__()
        self.steered = steered
        self.register_buffer("prototypes", F.normalize(prototypes.detach().clone(), dim=-1))
        self.kappa = float(kappa)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = self.steered(x.round().long())
        return torch.softmax(self.kappa * r @ self.prototypes.T, dim=-1)[:, 1:2]
