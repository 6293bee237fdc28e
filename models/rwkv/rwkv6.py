"""RWKV-6 ("Finch") in plain PyTorch: a chunked parallel form and a one-token recurrent step.

Parameter names and shapes follow the official checkpoints (BlinkDL/RWKV-LM, RWKV-v5 train code,
x060), so ``model.state_dict()`` *is* the official layout. Time mix per layer:

    xx = x_{t-1} - x_t;  x_* = x + xx * (maa_* + m_*),  m from a data-dependent LoRA (maa_w1/w2)
    w = time_decay + tanh(x_w @ decay_w1) @ decay_w2;  decay = exp(-exp(w))
    y_t = r_t (u * k_t^T v_t + S);  S <- k_t^T v_t + decay * S        (per head, u = time_faaaa)
    out = output(GroupNorm(y) * silu(gate(x_g)))

The chunked form never exponentiates a positive number (the cumulative-product trick overflows in
fp32 once decays are strong): inside a chunk the decay between two tokens splits at a sub-chunk
boundary into two factors of at most 1, and every exponent is a direct sum of log-decays, so the
chunked form keeps the recurrence's fp32 precision; chunks pass the state on exactly as the step does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.models.rwkv.base import (RWKVConfig, RWKVModel, from_chunks, group_norm_heads, ratio_ramp, stack_time,
                                       to_chunks, token_shift)

CHUNK, SUB = 16, 4


def wkv6_step(S, r, k, v, decay, u):
    """One token. r, k, v, decay: (B, H, N); u: (H, N); S: (B, H, N, N) [key, value] -> y (B, H, N), S.

    y = r (u k^T v + S) = (r.(u*k)) v + S^T r, so the bonus costs a dot product, not a second (N x N) term."""
    y = (r.unsqueeze(-2) @ S).squeeze(-2) + (r * u * k).sum(-1, keepdim=True) * v
    return y, decay.unsqueeze(-1) * S + k.unsqueeze(-1) @ v.unsqueeze(-2)


def wkv6_recurrent(r, k, v, logw, u, S):
    """Token-by-token WKV. r, k, v, logw: (B, T, H, N); u: (H, N); S: (B, H, N, N) [key, value]."""
    decay = torch.exp(logw)
    ys = []
    for t in range(r.shape[1]):
        y, S = wkv6_step(S, r[:, t], k[:, t], v[:, t], decay[:, t], u)
        ys.append(y)
    return stack_time(ys), S


def range_sums(lw: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Sums of ``lw`` (..., L, N) over the positions lo < m < hi, for index tensors lo, hi of one shape P ->
    (..., *P, N). One product with a 0/1 mask: each sum adds only its own terms, where a difference of two
    running sums would lose the small result to the rounding of a large shared prefix (strong decays)."""
    m = torch.arange(lw.shape[-2], device=lw.device)
    mask = ((m > lo.unsqueeze(-1)) & (m < hi.unsqueeze(-1))).to(lw.dtype)
    return (mask.reshape(-1, lw.shape[-2]) @ lw).view(*lw.shape[:-2], *lo.shape, lw.shape[-1])


def wkv6_chunked(r, k, v, logw, u, S, chunk: int = CHUNK, sub: int = SUB):
    """The same WKV as ``wkv6_recurrent``, ``chunk`` tokens at a time with matrix products.

    Inside a chunk, token s reaches token t > s through the decays of s+1 .. t-1. When s and t lie in different
    sub-chunks of ``sub`` tokens, that product splits at the end b of s's sub-chunk into (s, b] and (b, t), each
    factor at most 1, so the pairs of a sub-chunk with everything after it are one matrix product; pairs inside
    a sub-chunk get their decays one by one. Every exponent is a direct sum of log-decays (``range_sums``), never
    positive, so strong decays neither overflow nor cost precision. All chunks are computed at once; only the
    state, S <- decay(chunk) S + sum_s (k_s decay(s, end))^T v_s, runs chunk after chunk.
    """
    T = r.shape[1]
    r, k, v, lw = to_chunks(chunk, r, k, v, logw)  # (B, H, C, L, N)
    B, H, C, _, N = r.shape
    ns = chunk // sub
    dev = r.device
    t = torch.arange(chunk, device=dev)
    b = (torch.arange(ns, device=dev) + 1) * sub - 1  # the last position of each sub-chunk
    before = range_sums(lw, torch.full_like(t, -1), t)  # chunk start .. t-1
    after = range_sums(lw, t, torch.full_like(t, chunk))  # t+1 .. chunk end
    total = before[:, :, :, -1:] + lw[:, :, :, -1:]
    later = t[None, :] > b[:, None]  # (ns, L): t lies after sub-chunk j
    e_r = range_sums(lw, b[:, None].expand(ns, chunk), t[None, :].expand(ns, chunk))  # (b_j, t)
    R = r.unsqueeze(3) * torch.exp(e_r.masked_fill(~later[:, :, None], -float("inf")))  # (B, H, C, ns, L, N)
    e_k = range_sums(lw, t.view(ns, sub), b[:, None].expand(ns, sub) + 1)  # (s, b_j]
    K = k.view(B, H, C, ns, sub, N) * torch.exp(e_k)
    att = (R @ K.transpose(-1, -2)).permute(0, 1, 2, 4, 3, 5).reshape(B, H, C, chunk, chunk)
    ti, si = torch.meshgrid(torch.arange(sub, device=dev), torch.arange(sub, device=dev), indexing="ij")
    e_in = range_sums(lw.view(B, H, C, ns, sub, N), si, ti).masked_fill(~(si < ti)[:, :, None], -float("inf"))
    inner = torch.einsum("...ti,...si,...tsi->...ts", r.view(B, H, C, ns, sub, N), k.view(B, H, C, ns, sub, N),
                         torch.exp(e_in))  # (B, H, C, ns, sub, sub): pairs inside one sub-chunk
    eye = torch.eye(ns, dtype=r.dtype, device=dev)
    att = att + (inner.unsqueeze(-2) * eye[:, None, :, None]).reshape(B, H, C, chunk, chunk)
    y = att @ v + (r * u[None, :, None, None] * k).sum(-1, keepdim=True) * v
    kv = (k * torch.exp(after)).transpose(-1, -2) @ v
    decay = torch.exp(total).transpose(-1, -2)  # scales the key rows of S
    starts = []
    for i in range(C):
        starts.append(S)
        S = decay[:, :, i] * S + kv[:, :, i]
    y = y + (r * torch.exp(before)) @ torch.stack(starts, dim=2)
    return from_chunks(y, T), S


class TimeMix6(nn.Module):
    def __init__(self, cfg: RWKVConfig, layer_id: int):
        super().__init__()
        C, D, DD = cfg.n_embd, cfg.d_mix_lora, cfg.d_decay_lora
        self.n_head, self.head_size = cfg.n_head, cfg.head_size
        ratio_0_to_1 = layer_id / max(cfg.n_layer - 1, 1)
        ratio_1_to_0 = 1.0 - layer_id / cfg.n_layer
        ramp = ratio_ramp(C).view(1, 1, C)
        self.time_maa_x = nn.Parameter(1.0 - ramp**ratio_1_to_0)
        self.time_maa_w = nn.Parameter(1.0 - ramp**ratio_1_to_0)
        self.time_maa_k = nn.Parameter(1.0 - ramp**ratio_1_to_0)
        self.time_maa_v = nn.Parameter(1.0 - (ramp**ratio_1_to_0 + 0.3 * ratio_0_to_1))
        self.time_maa_r = nn.Parameter(1.0 - ramp**(0.5 * ratio_1_to_0))
        self.time_maa_g = nn.Parameter(1.0 - ramp**(0.5 * ratio_1_to_0))
        self.time_maa_w1 = nn.Parameter(torch.empty(C, 5 * D).uniform_(-1e-4, 1e-4))
        self.time_maa_w2 = nn.Parameter(torch.empty(5, D, C).uniform_(-1e-2, 1e-2))
        n = torch.arange(C, dtype=torch.float32)
        self.time_decay = nn.Parameter((-6 + 5 * (n / max(C - 1, 1)) ** (0.7 + 1.3 * ratio_0_to_1)).view(1, 1, C))
        self.time_decay_w1 = nn.Parameter(torch.empty(C, DD).uniform_(-1e-4, 1e-4))
        self.time_decay_w2 = nn.Parameter(torch.empty(DD, C).uniform_(-1e-2, 1e-2))
        faaaa = ratio_0_to_1 * (1 - n / max(C - 1, 1)) + ((n + 1) % 3 - 1) * 0.1
        self.time_faaaa = nn.Parameter(faaaa.view(self.n_head, self.head_size))
        self.receptance = nn.Linear(C, C, bias=False)
        self.key = nn.Linear(C, C, bias=False)
        self.value = nn.Linear(C, C, bias=False)
        self.output = nn.Linear(C, C, bias=False)
        self.gate = nn.Linear(C, C, bias=False)
        self.ln_x = nn.GroupNorm(self.n_head, C, eps=64e-5)
        self.shift_probe = nn.Identity()  # hook point: calibration reads the token-shift difference here

    def forward(self, x, last_x, S, recurrent: bool):
        B, T, C = x.shape
        H, N = self.n_head, self.head_size
        xx = self.shift_probe(token_shift(x, last_x))
        xxx = x + xx * self.time_maa_x
        m = torch.tanh(xxx @ self.time_maa_w1).view(B * T, 5, -1).transpose(0, 1)
        m = torch.bmm(m, self.time_maa_w2).view(5, B, T, C)
        mw, mk, mv, mr, mg = m.unbind(0)
        xw = x + xx * (self.time_maa_w + mw)
        xk = x + xx * (self.time_maa_k + mk)
        xv = x + xx * (self.time_maa_v + mv)
        xr = x + xx * (self.time_maa_r + mr)
        xg = x + xx * (self.time_maa_g + mg)
        r = self.receptance(xr).view(B, T, H, N)
        k = self.key(xk).view(B, T, H, N)
        v = self.value(xv).view(B, T, H, N)
        g = F.silu(self.gate(xg))
        w = self.time_decay + torch.tanh(xw @ self.time_decay_w1) @ self.time_decay_w2
        logw = -torch.exp(w).view(B, T, H, N)
        u = self.time_faaaa.reshape(H, N)
        wkv = wkv6_recurrent if recurrent or T == 1 else wkv6_chunked
        y, S = wkv(r, k, v, logw, u, S)
        y = group_norm_heads(y.reshape(B, T, C), H, self.ln_x.weight, self.ln_x.bias)
        return self.output(y * g), x[:, -1], S


class ChannelMix6(nn.Module):
    def __init__(self, cfg: RWKVConfig, layer_id: int):
        super().__init__()
        C = cfg.n_embd
        ramp = ratio_ramp(C).view(1, 1, C)
        ratio_1_to_0 = 1.0 - layer_id / cfg.n_layer
        self.time_maa_k = nn.Parameter(1.0 - ramp**ratio_1_to_0)
        self.time_maa_r = nn.Parameter(1.0 - ramp**ratio_1_to_0)
        self.key = nn.Linear(C, cfg.dim_ffn, bias=False)
        self.receptance = nn.Linear(C, C, bias=False)
        self.value = nn.Linear(cfg.dim_ffn, C, bias=False)
        self.shift_probe = nn.Identity()

    def forward(self, x, last_x):
        xx = self.shift_probe(token_shift(x, last_x))
        xk = x + xx * self.time_maa_k
        xr = x + xx * self.time_maa_r
        k = torch.relu(self.key(xk)) ** 2
        return torch.sigmoid(self.receptance(xr)) * self.value(k), x[:, -1]


class RWKV6(RWKVModel):
    """RWKV-6 language model. ``forward(idx, state)`` -> (logits (B, T, V), new state)."""

    version = 6
    time_mix = TimeMix6
    channel_mix = ChannelMix6

    def _time_mix(self, att, x, last_x, wkv, recurrent, carry):
        dx, ax, S = att(x, last_x, wkv, recurrent)
        return dx, ax, S, carry
