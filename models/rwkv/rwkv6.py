"""RWKV-6 ("Finch") in plain PyTorch: a chunked parallel form and a one-token recurrent step.

Parameter names and shapes follow the official checkpoints (BlinkDL/RWKV-LM, RWKV-v5 train code,
x060), so ``model.state_dict()`` *is* the official layout. Time mix per layer:

    xx = x_{t-1} - x_t;  x_* = x + xx * (maa_* + m_*),  m from a data-dependent LoRA (maa_w1/w2)
    w = time_decay + tanh(x_w @ decay_w1) @ decay_w2;  decay = exp(-exp(w))
    y_t = r_t (u * k_t^T v_t + S);  S <- k_t^T v_t + decay * S        (per head, u = time_faaaa)
    out = output(GroupNorm(y) * silu(gate(x_g)))

The chunked form computes, inside a chunk, every pairwise decay exp(sum of log-decays between s
and t) explicitly, so no exponent is ever positive (the cumulative-product trick overflows in
fp32 once decays are strong); chunks pass the state on exactly as the step does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.models.rwkv.base import RWKVConfig, RWKVModel, group_norm_heads, ratio_ramp, stack_time, token_shift

CHUNK = 16


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


def wkv6_chunked(r, k, v, logw, u, S, chunk: int = CHUNK):
    """The same WKV as ``wkv6_recurrent``, ``chunk`` tokens at a time with matrix products."""
    B, T, H, N = r.shape
    out = []
    for c0 in range(0, T, chunk):
        rc, kc, vc, lw = (z[:, c0:c0 + chunk].transpose(1, 2) for z in (r, k, v, logw))  # (B, H, L, N)
        L = rc.shape[2]
        A = torch.cumsum(lw, dim=2)  # inclusive log-decay sums
        A_ex = A - lw  # up to t-1
        expo = A_ex.unsqueeze(3) - A.unsqueeze(2)  # (B, H, t, s, N): sum of log-decays over s+1..t-1
        mask = torch.tril(torch.ones(L, L, dtype=torch.bool, device=r.device), diagonal=-1)
        expo = torch.where(mask[None, None, :, :, None], expo, torch.full_like(expo, -float("inf")))
        att = torch.einsum("bhti,bhsi,bhtsi->bhts", rc, kc, torch.exp(expo))
        y = att @ vc
        y = y + ((rc * u.unsqueeze(1) * kc).sum(-1, keepdim=True)) * vc
        y = y + torch.einsum("bhti,bhij->bhtj", rc * torch.exp(A_ex), S)
        A_last = A[:, :, -1:]
        S = torch.exp(A_last).transpose(-1, -2) * S + torch.einsum("bhsi,bhsj->bhij", kc * torch.exp(A_last - A), vc)
        out.append(y.transpose(1, 2))
    return torch.cat(out, dim=1), S


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
