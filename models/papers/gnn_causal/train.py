"""Training (task loss + optional interchange-intervention loss, prompt warm-up) and IIA evaluation.

Prompt selection (the paper's "first epochs choose the best prompt"; how "best" is judged is not in
the notes, so this is a choice made here): for ``warmup_epochs`` epochs the transmission module reads
all q x m tokens of a node; the weight its softmax gives to each prompt's tokens is summed over the
real training nodes, and after the warm-up the prompt with the largest total is fixed for the rest of
training and for inference. Without the module (the mean-pooling baselines) prompt 0 is used throughout.

Interchange-intervention training (IIT): pairs are (batch, batch rolled by one); per pair a random node
j real in both graphs and a layer from ``iit_layers`` (all channels). The loss is the cross-entropy
between the intervened model's logits and the high-level model's counterfactual label (Z_j from the
source), weighted by ``iit_weight`` and added to the task cross-entropy.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import numpy as np
import torch
from torch import nn

from edgesmith.common import seed_everything
from edgesmith.models.papers.gnn_causal.config import TrainConfig
from edgesmith.models.papers.gnn_causal.data import GraphSet, counterfactual_labels
from edgesmith.models.papers.gnn_causal.gnn import CausalGNN, Site, interchange


@contextlib.contextmanager
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic whatever the core count; leaves the shared machine usable
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def select_tokens(tokens: np.ndarray, prompt: int | None) -> torch.Tensor:
    """(B, N, q, m, d) -> (B, N, q*m, d) for all prompts (``None``) or (B, N, m, d) for one."""
    t = torch.from_numpy(np.ascontiguousarray(tokens))
    if prompt is None:
        b, n, q, m, d = t.shape
        return t.reshape(b, n, q * m, d)
    return t[:, :, prompt]


def batch_inputs(data: GraphSet, idx: np.ndarray, prompt: int | None) -> tuple[torch.Tensor, ...]:
    return select_tokens(data.tokens[idx], prompt), torch.from_numpy(data.adj[idx]), torch.from_numpy(data.mask[idx])


def pair_nodes(mask: np.ndarray, partner: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A node index real in both graph g and graph ``partner[g]`` (real nodes come first in each graph)."""
    both = np.minimum(mask.sum(1), mask[partner].sum(1)).astype(np.int64)
    return (rng.random(len(mask)) * both).astype(np.int64)


def current_prompt(model: CausalGNN) -> int | None:
    p = int(model.prompt)
    return None if p < 0 else p


def train(model: CausalGNN, data: GraphSet, cfg: TrainConfig, on_epoch: Callable[[int, dict], None] | None = None,
          fixed_prompt: int = 0):
    """Train in place; returns per-epoch records (loss, prompt in use, prompt weight mass during warm-up).

    ``fixed_prompt``: the prompt used throughout when there is no warm-up (no attention module, or 0 warm-up epochs).
    """
    seed_everything(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    q = data.tokens.shape[2]
    warmup = cfg.warmup_epochs if model.chooses_prompt else 0
    model.prompt.fill_(-1 if warmup > 0 else fixed_prompt)
    history = []
    model.train()
    with one_thread():
        for epoch in range(cfg.epochs):
            prompt = current_prompt(model)
            mass = np.zeros(q)
            total = 0.0
            perm = torch.randperm(len(data), generator=gen).numpy()
            for i in range(0, len(data), cfg.batch):
                idx = np.sort(perm[i : i + cfg.batch])
                inputs = batch_inputs(data, idx, prompt)
                y = torch.from_numpy(data.y[idx])
                opt.zero_grad()
                logits, _, weights = model.run(*inputs)
                loss = nn.functional.cross_entropy(logits, y)
                if prompt is None and weights is not None:
                    w = weights.detach().reshape(*weights.shape[:2], q, -1).sum(-1) * inputs[2][..., None]
                    mass += w.sum((0, 1)).numpy()
                if cfg.iit_weight > 0 and len(idx) > 1:
                    loss = loss + cfg.iit_weight * _iit_loss(model, data, idx, inputs, prompt, cfg, rng)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            record = {"epoch": epoch, "loss": total / len(data), "prompt": prompt}
            if prompt is None:
                record["prompt_mass"] = (mass / mass.sum()).tolist()
                if epoch == warmup - 1:
                    model.prompt.fill_(int(np.argmax(mass)))
            history.append(record)
            if on_epoch is not None:
                on_epoch(epoch, record)
    model.eval()
    return history


def _iit_loss(model, data, idx, inputs, prompt, cfg, rng) -> torch.Tensor:
    partner = np.roll(np.arange(len(idx)), 1)
    nodes = pair_nodes(data.mask[idx], partner, rng)
    layer = int(rng.choice(cfg.iit_layers))
    source = tuple(t[partner] for t in inputs)
    logits, _ = interchange(model, inputs, source, Site(layer), torch.from_numpy(nodes))
    cf = counterfactual_labels(data.z[idx], data.z[idx][partner], data.adj[idx], nodes)
    return nn.functional.cross_entropy(logits, torch.from_numpy(cf))


@torch.no_grad()
def accuracy(model: CausalGNN, data: GraphSet, batch: int = 128) -> float:
    prompt = current_prompt(model)
    correct = 0
    with one_thread():
        for i in range(0, len(data), batch):
            idx = np.arange(i, min(i + batch, len(data)))
            logits = model.run(*batch_inputs(data, idx, prompt))[0]
            correct += int((logits.argmax(-1).numpy() == data.y[idx]).sum())
    return correct / len(data)


def default_sites(model: CausalGNN) -> list[Site]:
    """Every layer, with all channels and with each half of the channels."""
    sites = []
    for layer, width in enumerate(model.widths):
        sites += [Site(layer), Site(layer, 0, width // 2), Site(layer, width // 2, width)]
    return sites


@torch.no_grad()
def iia(model: CausalGNN, data: GraphSet, sites: list[Site] | None = None, seed: int = 0) -> list[dict]:
    """Interchange-intervention accuracy per site, aligning node j's representation with Z_j.

    Pairs: every graph as base with a seeded random other graph as source, one random node j real in
    both. ``iia``: how often the intervened prediction equals the causal model's counterfactual label;
    ``iia_changed``: the same over the pairs where that label differs from the base label (where
    agreeing with the base run alone would not score).
    """
    rng = np.random.default_rng(seed)
    n = len(data)
    partner = (np.arange(n) + rng.integers(1, n, size=n)) % n
    nodes = pair_nodes(data.mask, partner, rng)
    cf = counterfactual_labels(data.z, data.z[partner], data.adj, nodes)
    changed = cf != data.y
    prompt = current_prompt(model)
    base = batch_inputs(data, np.arange(n), prompt)
    source = tuple(t[torch.from_numpy(partner)] for t in base)
    rows = []
    with one_thread():
        for site in (sites or default_sites(model)):
            logits, _ = interchange(model, base, source, site, torch.from_numpy(nodes))
            hit = logits.argmax(-1).numpy() == cf
            rows.append({"site": site.label(model.widths[site.layer]), "layer": site.layer, "start": site.start,
                         "stop": model.widths[site.layer] if site.stop is None else site.stop,
                         "iia": float(hit.mean()), "iia_changed": float(hit[changed].mean()) if changed.any() else None,
                         "n_pairs": int(n), "n_changed": int(changed.sum())})
    return rows
