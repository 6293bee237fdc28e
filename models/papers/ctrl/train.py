"""CTRL's two training stages for the toy critic, the test-time critique-revision loop, and baselines.

Stage 1 (``sft``): each training problem's buggy program is run through the generator with every
critique; the critiques whose revision passes form the target distribution (uniform over them), and
the critic is fitted to it by cross-entropy. Problems no single critique can fix are dropped.

Stage 2 (``grpo``): on fresh problems (no labels, only tests), ``group`` critiques are sampled per
problem from the current critic, the generator revises with each, reward = 1 if the revision passes
the hidden tests; the advantage of each critique is its reward normalised within its group,
``(r - mean) / std`` (0 for a group whose rewards are all equal). The loss is the policy gradient
``-A log pi(c)`` plus ``kl`` times the exact KL divergence from the frozen stage-1 critic. Each batch
of groups gets one gradient step while it is still on-policy, so PPO's probability ratio is 1 and its
clipping would never act: we use the KL penalty, not clipping (as the public CTRL code trains with a
KL term to the reference model).

Test time (``iterate``): up to R rounds of critique -> revision; a program that passes the visible
tests is left alone; the pass rate after each round is measured on the hidden tests. Critics decode
greedily, so an evaluation is deterministic.
"""
from __future__ import annotations

import copy
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from edgesmith.models.papers.ctrl.config import CtrlConfig
from edgesmith.models.papers.ctrl.critic import (
    CriticNet, critique_masks, decode, encode_batch, masked_log_probs,
)
from edgesmith.models.papers.ctrl.world import Problem, Program, passes, passes_visible, passing_critiques, revise, sample_problem

# states -> one critique per state, or None for "no critique"
Policy = Callable[[list[tuple[Program, Problem]]], list]


def grpo_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Group-normalised advantages for rewards of shape (problems, group): ``(r - mean) / std`` per row,
    0 for rows whose rewards are all equal (such a group says nothing about which critique is better)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < 2:
        raise ValueError(f"rewards must be (problems, group >= 2), got shape {r.shape}")
    mean = r.mean(axis=1, keepdims=True)
    std = r.std(axis=1, keepdims=True)
    return np.where(std > eps, (r - mean) / np.maximum(std, eps), 0.0)


def sft_targets(problems: list[Problem]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs, target distributions and masks for the problems some critique fixes (execution-built)."""
    keep, targets = [], []
    for prob in problems:
        good = passing_critiques(prob.buggy, prob).reshape(-1)
        if good.any():
            keep.append(prob)
            targets.append(good / good.sum())
    x = encode_batch([(p.buggy, p) for p in keep])
    return x, np.asarray(targets, dtype=np.float32), critique_masks([p.buggy for p in keep])


def _soft_ce(model: CriticNet, x, t, m) -> torch.Tensor:
    logp = masked_log_probs(model(x), m)
    return -(t * torch.where(m, logp, torch.zeros_like(logp))).sum(dim=1).mean()


def sft(model: CriticNet, problems: list[Problem], cfg: CtrlConfig, progress: bool = False) -> list[float]:
    """Stage 1: fit the critic to the execution-built critique distributions; returns the epoch losses."""
    x, t, m = (torch.from_numpy(a) for a in sft_targets(problems))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.sft_lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    history = []
    model.train()
    for _ in tqdm(range(cfg.sft_epochs), desc="ctrl sft", disable=not progress, leave=False):
        perm = torch.randperm(len(x), generator=gen)
        total = 0.0
        for i in range(0, len(x), 64):
            idx = perm[i : i + 64]
            loss = _soft_ce(model, x[idx], t[idx], m[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        history.append(total / max(len(x), 1))
    model.eval()
    return history


def grpo(model: CriticNet, cfg: CtrlConfig, progress: bool = False) -> list[dict]:
    """Stage 2: GRPO from the current (stage-1) critic, with a KL penalty to a frozen copy of it."""
    ref = copy.deepcopy(model).eval()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.grpo_lr)
    rng = np.random.default_rng(cfg.seed * 1000 + 3)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    history = []
    model.train()
    for it in tqdm(range(cfg.grpo_iters), desc="ctrl grpo", disable=not progress, leave=False):
        probs = [sample_problem(rng) for _ in range(cfg.batch)]
        x = torch.from_numpy(encode_batch([(p.buggy, p) for p in probs]))
        mask = torch.from_numpy(critique_masks([p.buggy for p in probs]))
        logp = masked_log_probs(model(x), mask)
        picks = torch.multinomial(logp.detach().exp(), cfg.group, replacement=True, generator=gen)
        rewards = np.array([[float(passes(revise(p.buggy, p, decode(c)), p)) for c in row.tolist()]
                            for p, row in zip(probs, picks)])
        adv = torch.from_numpy(grpo_advantages(rewards)).float()
        pg = -(adv * logp.gather(1, picks)).mean()
        with torch.no_grad():
            ref_logp = masked_log_probs(ref(x), mask)
        # zero the masked entries before subtracting: -inf - -inf would put NaN into the gradient
        zero = torch.zeros_like(logp)
        kl = (logp.exp() * (torch.where(mask, logp, zero) - torch.where(mask, ref_logp, zero))).sum(dim=1).mean()
        loss = pg + cfg.kl * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append({"iter": it, "mean_reward": float(rewards.mean()), "kl": float(kl.detach())})
    model.eval()
    return history


# --- policies and the test-time loop ---------------------------------------------------------------


def network_policy(predict: Callable[[np.ndarray], np.ndarray]) -> Policy:
    """Greedy critiques from a logits function (torch fp32, int8 ONNX, ...), invalid critiques masked."""

    def policy(states):
        logits = np.asarray(predict(encode_batch(states)), dtype=np.float64)
        logits = np.where(critique_masks([s[0] for s in states]), logits, -np.inf)
        return [decode(i) for i in np.argmax(logits, axis=1)]

    return policy


def random_policy(seed: int) -> Policy:
    """A critique drawn uniformly from those that exist for the program (probabilities sum to one)."""
    rng = np.random.default_rng(seed)

    def policy(states):
        out = []
        for prog, _ in states:
            p = random_critique_probs(prog)
            out.append(decode(int(rng.choice(len(p), p=p))))
        return out

    return policy


def random_critique_probs(program: Program) -> np.ndarray:
    mask = critique_masks([program])[0].astype(np.float64)
    return mask / mask.sum()


def no_critique_policy(states) -> list:
    return [None] * len(states)


def iterate(problems: list[Problem], policy: Policy, rounds: int) -> np.ndarray:
    """Pass rate (hidden tests) after 0..rounds critique-revision rounds."""
    progs = [p.buggy for p in problems]
    rates = [np.mean([passes(g, p) for g, p in zip(progs, problems)])]
    for _ in range(rounds):
        active = [i for i, (g, p) in enumerate(zip(progs, problems)) if not passes_visible(g, p)]
        if active:
            crits = policy([(progs[i], problems[i]) for i in active])
            for i, c in zip(active, crits):
                progs[i] = revise(progs[i], problems[i], c)
        rates.append(np.mean([passes(g, p) for g, p in zip(progs, problems)]))
    return np.asarray(rates, dtype=np.float64)


def torch_predict(model: CriticNet) -> Callable[[np.ndarray], np.ndarray]:
    def predict(x):
        with torch.no_grad():
            return model(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy()

    return predict
