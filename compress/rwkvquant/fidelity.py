"""How far a quantized language model is from its fp32 reference, beyond perplexity: the mean KL divergence of every
next-token prediction, and the NLL increase split exactly into the part even in the weight error and the odd part.

The measures of the RWKVQuant studies (``bench/studies/rwkv_quant_seeds.py``) and their tests; models are torch
language models, tokens (B, T) -> (logits (B, T, V), state), fed equal-length windows less their last token.
"""
from __future__ import annotations

import numpy as np


def reference_scores(reference, windows: np.ndarray, batch: int = 16) -> dict:
    """One pass of the fp32 reference over the windows: its mean NLL (``token_nll``'s) and its next-byte
    log-probabilities per batch, float64, what every cell's KL is taken against (64 windows of 256 bytes: 34 MB
    for a byte-level model)."""
    import torch

    from edgesmith.models.rwkv.train import window_nll

    logprobs = []

    def forward(x):
        logits = reference(x)[0]
        logprobs.append(torch.log_softmax(logits.double(), -1))
        return logits

    return {"nll": float(window_nll(forward, windows, batch).mean()), "logprobs": logprobs}


def model_scores(model, windows: np.ndarray, ref_logprobs: list | None = None, batch: int = 16) -> dict:
    """One pass of ``model`` (tokens (B, T) -> (logits (B, T, V), state)) over the windows less their last token,
    as the perplexity is: its mean NLL in nats and, given the reference's ``logprobs`` of the same batches, the
    mean over every next-byte prediction of KL(reference || model)."""
    import torch

    from edgesmith.models.rwkv.train import window_nll

    kl = [0.0, 0]

    def forward(x):
        logits = model(x)[0]
        if ref_logprobs is not None:
            lp = ref_logprobs[kl[1]]
            kl[0] += float((lp.exp() * (lp - torch.log_softmax(logits.double(), -1))).sum())
            kl[1] += 1
        return logits

    nll = float(window_nll(forward, windows, batch).mean())
    n = sum(lp.shape[0] * lp.shape[1] for lp in ref_logprobs) if ref_logprobs is not None else 0
    return {"nll": nll, "kl": kl[0] / n if n else None}


def token_kl(reference, model, windows: np.ndarray, batch: int = 16) -> float:
    """Mean over every next-byte prediction of KL(reference || model) in nats, both torch language models
    (tokens (B, T) -> logits (B, T, V)) fed the windows less their last token, as the perplexity is."""
    return model_scores(model, windows, reference_scores(reference, windows, batch)["logprobs"], batch)["kl"]


def token_nll(model, windows: np.ndarray, batch: int = 16) -> float:
    """Mean NLL in nats of every next byte of the equal-length windows (the perplexity's log), torch, from the
    zero state: the reference models' own ``window_nll``, averaged."""
    return model_scores(model, windows, None, batch)["nll"]


def mirrored(reference, quantized):
    """A copy of ``reference`` with every parameter the quantizer changed reflected through its reference value
    (w - D where the quantized model has w + D): the block linears (dequantized) and any other parameter."""
    import copy

    import torch

    from edgesmith.compress.rwkvquant.rwkvquant import linear_modules

    out = copy.deepcopy(reference).eval()
    quantized_values = {f"{n}.weight": m.weight for n, m in linear_modules(quantized).items()}  # dequantized
    for name, param in quantized.named_parameters():
        quantized_values.setdefault(name, param)
    ref = dict(reference.named_parameters())
    with torch.no_grad():
        for name, param in out.named_parameters():
            q = quantized_values.get(name)
            if q is not None and q.shape == param.shape:
                param.copy_(2 * ref[name] - q.to(param.dtype))
    return out


def split_parity(base: float, plus: float, minus: float) -> dict:
    return {"nll_fp32": base, "nll_quantized": plus, "nll_mirrored": minus,
            "even": (plus + minus) / 2 - base, "odd": (plus - minus) / 2}


def nll_parity(reference, quantized, windows: np.ndarray, base_nll: float | None = None) -> dict:
    """The quantized model's NLL increase on ``windows`` split exactly into the part even in its weight error
    (the same for w+D and w-D: curvature, D'HD/2 to second order) and the odd part (g.D to first order)."""
    base = token_nll(reference, windows) if base_nll is None else base_nll
    return split_parity(base, token_nll(quantized, windows), token_nll(mirrored(reference, quantized), windows))
