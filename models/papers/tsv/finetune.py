"""Fine-tune the shipped RWKV reference LM on the synthetic fact world.

Next-byte cross-entropy on random windows of the world's text (``facts.corpus``: true statements
about every fact plus judged statements about the judge entities); AdamW with warm-up and
cosine decay, as ``models.rwkv.train`` does for the reference model. One torch thread (restored
afterwards) keeps the result reproducible for the seed and the machine usable.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.models.papers.ood.config import Config
from edgesmith.models.papers.tsv.facts import World, corpus


@dataclass(frozen=True)
class FinetuneConfig(Config):
    steps: int = 200
    batch: int = 32
    seq_len: int = 40
    lr: float = 2e-3
    n_lines: int = 20000
    judged_fraction: float = 0.3

    def validate(self) -> None:
        self._need_float("judged_fraction", 0.0, 1.0, open_lo=False)
        self._need_int("steps", 1)
        self._need_int("batch", 1)
        self._need_int("seq_len", 8, 1024)
        self._need_int("n_lines", 10)
        self._need_float("lr", 0.0, 1.0)


def finetune(model: nn.Module, world: World, cfg: FinetuneConfig, seed: int) -> dict:
    """Train ``model`` in place; returns facts (final loss, steps)."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    stream = corpus(world, cfg.n_lines, rng, cfg.judged_fraction)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.99))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    losses = []
    try:
        model.train()
        warm = max(1, min(20, cfg.steps // 5))
        for step in range(cfg.steps):
            lr = cfg.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / cfg.steps)))
            for g in opt.param_groups:
                g["lr"] = lr
            starts = rng.integers(0, len(stream) - cfg.seq_len - 1, cfg.batch)
            x = torch.from_numpy(np.stack([stream[s:s + cfg.seq_len + 1] for s in starts]))
            logits, _ = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        torch.set_num_threads(threads)
        model.eval()
    return {"steps": cfg.steps, "final_loss": float(np.mean(losses[-20:]))}


@torch.no_grad()
def recall(model: nn.Module, world: World, seq_len: int) -> float:
    """Share of detection facts whose true value the LM scores highest among its attribute's values (template 0)."""
    from edgesmith.models.papers.tsv.facts import ATTRIBUTES, pack, qa_line

    hits = 0
    for e, a in world.detection_pairs():
        cands = ATTRIBUTES[a]
        texts = [qa_line(e, a, v) for v in cands]
        toks = torch.from_numpy(pack(texts, seq_len))
        logp = F.log_softmax(model(toks[:, :-1])[0], -1).gather(-1, toks[:, 1:, None])[..., 0]
        start = len(f"Q: {a} of {e}? A: ")
        scores = [float(logp[i, seq_len - len(t) + start - 1:].sum()) for i, t in enumerate(texts)]
        hits += cands[int(np.argmax(scores))] == world.facts[(e, a)]
    return hits / len(world.detection_pairs())
