"""Metrics for users' own models and data: how a batch of outputs is scored.

    accuracy    argmax of the (first) output vs integer labels            higher is better
    top5        label among the 5 largest outputs (``topK`` for any K)    higher is better
    binary      one probability per position (a detector's, e.g. a VAD's    higher is better
                per frame) >= 0.5 vs 0/1 labels shaped like the outputs
    mse, mae    mean squared / absolute error vs target arrays            lower is better
    perplexity  exp(mean next-token NLL) of logits (B, T, V) vs tokens    lower is better
    fidelity    output SQNR (dB) against the fp32 model's outputs on the same inputs, with the largest
                absolute error in ``extra``; the default when no labels are given. Identical outputs
                have no finite SQNR: they score SQNR_CAP dB and ``extra["identical"]`` says so.

Every metric takes ``(outputs, targets)`` and returns ``(value, extra)``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from edgesmith.common import EdgesmithError

SQNR_CAP = 200.0  # dB reported for outputs identical to the reference


@dataclass(frozen=True)
class MetricSpec:
    name: str
    higher_is_better: bool
    unit: str
    needs: str  # "labels" (class ids), "targets" (arrays like the outputs), "tokens", "reference"
    fn: Callable


def _logits(outputs) -> np.ndarray:
    out = np.asarray(outputs)
    if out.ndim < 2:
        raise EdgesmithError(f"the model's output has shape {out.shape}; a classification metric needs (batch, "
                             "classes).", "use --metric mse/mae/fidelity for this model.")
    return out.reshape(out.shape[0], -1) if out.ndim > 2 else out


def _labels(labels, n: int, classes: int) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or len(y) != n or not np.issubdtype(y.dtype, np.integer):
        raise EdgesmithError(f"labels have shape {y.shape} and dtype {y.dtype}; this metric needs one integer class "
                             f"per evaluation sample ({n}).", "give labels as an int array of shape (samples,).")
    if n and (y.min() < 0 or y.max() >= classes):  # the argmax never equals such a label: the score would be wrong
        raise EdgesmithError(f"labels run from {y.min()} to {y.max()}, but the model outputs {classes} class score(s), "
                             f"so a class id must be 0 to {classes - 1}.",
                             "give class ids that index the model's outputs (a one-logit binary model: use --metric "
                             "mse on 0/1 targets, or output two scores).")
    return y


def accuracy(outputs, labels) -> tuple[float, dict]:
    out = _logits(outputs)
    y = _labels(labels, len(out), out.shape[1])
    return float(np.mean(out.argmax(axis=1) == y)), {}


def top_k(k: int):
    def fn(outputs, labels) -> tuple[float, dict]:
        out = _logits(outputs)
        y = _labels(labels, len(out), out.shape[1])
        if k > out.shape[1]:
            raise EdgesmithError(f"top{k} needs at least {k} classes; the model outputs {out.shape[1]}.",
                                 "use a smaller k (top1 is accuracy).")
        top = np.argpartition(-out, k - 1, axis=1)[:, :k]
        return float(np.mean(np.any(top == y[:, None], axis=1))), {"k": k}
    return fn


def binary(outputs, labels) -> tuple[float, dict]:
    """Fraction of positions whose probability, thresholded at 0.5, matches the 0/1 label there."""
    out, y = _targets(outputs, labels)
    if y.size and not np.all((y == 0) | (y == 1)):
        raise EdgesmithError("binary accuracy needs 0/1 labels, one per output value.",
                             "give labels shaped like the outputs (e.g. (samples, steps) for a per-frame detector).")
    if out.size and (out.min() < 0 or out.max() > 1):
        raise EdgesmithError(f"binary accuracy thresholds probabilities at 0.5; the outputs run from {out.min():.3g} "
                             f"to {out.max():.3g}.", "use a model whose output is a probability (after a sigmoid).")
    return float(np.mean((out >= 0.5) == (y == 1))), {"positives": float(np.mean(y))}


def _targets(outputs, targets) -> tuple[np.ndarray, np.ndarray]:
    out, t = np.asarray(outputs, np.float64), np.asarray(targets, np.float64)
    if out.shape != t.shape:
        if out.size == t.size:
            t = t.reshape(out.shape)
        else:
            raise EdgesmithError(f"targets have shape {t.shape} but the model's outputs have shape {out.shape}.",
                                 "give one target array per evaluation sample, shaped like the output.")
    return out, t


def mse(outputs, targets) -> tuple[float, dict]:
    out, t = _targets(outputs, targets)
    return float(np.mean((out - t) ** 2)), {}


def mae(outputs, targets) -> tuple[float, dict]:
    out, t = _targets(outputs, targets)
    return float(np.mean(np.abs(out - t))), {}


def perplexity(logits, tokens) -> tuple[float, dict]:
    """Next-token perplexity: logits (B, T, V) of tokens[:, :T] scored against tokens[:, 1:T+1]."""
    lg = np.asarray(logits)
    tok = np.asarray(tokens)
    if lg.ndim != 3 or tok.ndim != 2 or tok.shape[1] < lg.shape[1] + 1 or tok.shape[0] != lg.shape[0]:
        raise EdgesmithError(f"perplexity needs logits (batch, T, vocab) and tokens (batch, T + 1); got {lg.shape} "
                             f"and {tok.shape}.", "give token windows one longer than the model's input.")
    target = tok[:, 1:lg.shape[1] + 1]
    if target.max() >= lg.shape[2] or target.min() < 0:
        raise EdgesmithError(f"token ids reach {int(target.max())} but the model has {lg.shape[2]} logits.",
                             "tokenize the text with the model's own tokenizer.")
    nll = token_nll(lg, target)
    return float(np.exp(nll.mean())), {"tokens": int(target.size), "nll_per_token": float(nll.mean())}


def token_nll(logits: np.ndarray, target: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per position, computed a row at a time (a 65,536-word vocabulary makes
    a whole batch of float64 logits many gigabytes)."""
    out = np.empty(target.shape, np.float64)
    for i in range(logits.shape[0]):
        lg = np.asarray(logits[i], np.float64)
        m = lg.max(axis=-1, keepdims=True)
        logz = m[..., 0] + np.log(np.exp(lg - m).sum(axis=-1))
        out[i] = logz - np.take_along_axis(lg, target[i][..., None], axis=-1)[..., 0]
    return out


def fidelity(outputs, reference) -> tuple[float, dict]:
    """Output SQNR in dB against the reference outputs (capped at SQNR_CAP when identical), max abs error."""
    out, ref = _targets(outputs, reference)
    err = out - ref
    noise = float(np.sum(err ** 2))
    signal = float(np.sum(ref ** 2))
    max_err = float(np.max(np.abs(err))) if err.size else 0.0
    if signal == 0.0:  # SQNR has no signal to measure against: every variant would score the cap or -inf
        raise EdgesmithError(f"the fp32 model's outputs on the {ref.size} evaluation values are all zero, so fidelity "
                             "(output SQNR against them) cannot score its variants.",
                             "pass --eval-data with inputs the model responds to (a trained model), or labels or "
                             "targets with --metric accuracy/mse/mae.")
    if noise == 0.0:
        return SQNR_CAP, {"max_abs_error": max_err, "identical": True}
    sqnr = 10.0 * np.log10(max(signal, 1e-300) / noise)
    return float(min(sqnr, SQNR_CAP)), {"max_abs_error": max_err, "identical": False}


_METRICS = {
    "accuracy": MetricSpec("accuracy", True, "fraction", "labels", accuracy),
    "binary": MetricSpec("binary", True, "fraction", "targets", binary),
    "mse": MetricSpec("mse", False, "", "targets", mse),
    "mae": MetricSpec("mae", False, "", "targets", mae),
    "perplexity": MetricSpec("perplexity", False, "per token", "tokens", perplexity),
    "fidelity": MetricSpec("fidelity", True, "dB output SQNR vs fp32", "reference", fidelity),
}
METRIC_NAMES = (*_METRICS, "topK (e.g. top5)")


def get_metric(name: str) -> MetricSpec:
    m = re.fullmatch(r"top(\d+)", name or "")
    if m and int(m.group(1)) >= 1:
        k = int(m.group(1))
        return MetricSpec(f"top{k}", True, "fraction", "labels", top_k(k))
    if name not in _METRICS:
        raise EdgesmithError(f"unknown metric {name!r}.", f"use one of: {', '.join(METRIC_NAMES)}.")
    return _METRICS[name]
