"""RWKV-7 ("Goose") in plain PyTorch: a sequence form and a one-token recurrent step.

Parameter names and shapes follow the official checkpoints (BlinkDL/RWKV-LM, RWKV-v7 x070), so
``model.state_dict()`` *is* the official layout. Time mix per layer:

    x_* = x + xx * x_*   (r, w, k, v, a, g)
    w = -softplus(-(w0 + tanh(x_w@w1)@w2)) - 0.5;  decay = exp(-exp(w))
    v += (v_first - v) * sigmoid(v0 + x_v@v1@v2)      (layers > 0: value residual)
    a = sigmoid(a0 + x_a@a1@a2);  g = sigmoid(x_g@g1)@g2
    kk = normalise_per_head(k * k_k);  k = k * (1 + (a-1) * k_a)
    S = S diag(decay) - S kk (kk*a)^T + v k^T;  y = S r              (per head, S is [value, key])
    out = output((GroupNorm(y) + (r*k*r_k).sum_per_head * v) * g)

The sequence form computes every projection for all tokens at once and scans only the matrix
state over time (the generalised delta rule has no cheap exact chunked form in plain torch); the
step form runs the same cell on one token, so the two agree to rounding.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.models.rwkv.base import RWKVConfig, RWKVModel, group_norm_heads, ratio_ramp, stack_time, token_shift


def wkv7_step(S, r, decay, k, v, kk, a):
    """One token of the delta rule. r, decay, k, v, kk, a: (B, H, N); S: (B, H, N, N) [value, key] -> y, S.

    S <- S diag(decay) + (S(-kk)) (kk*a)^T + v k^T, the two rank-one terms as one (N x 2)(2 x N) product: in the
    step graph one MatMul replaces two broadcast outer products and an addition over the whole state."""
    sa = S @ (-kk).unsqueeze(-1)  # (B, H, N, 1)
    S = S * decay.unsqueeze(-2) + torch.cat([sa, v.unsqueeze(-1)], -1) @ torch.stack([kk * a, k], -2)
    return (S @ r.unsqueeze(-1)).squeeze(-1), S


def wkv7_scan(r, logw, k, v, kk, a, S):
    """r, logw, k, v, kk, a: (B, T, H, N); S: (B, H, N, N) [value, key] -> y (B, T, H, N), S."""
    decay = torch.exp(logw)
    ys = []
    for t in range(r.shape[1]):
        y, S = wkv7_step(S, r[:, t], decay[:, t], k[:, t], v[:, t], kk[:, t], a[:, t])
        ys.append(y)
    return stack_time(ys), S


class TimeMix7(nn.Module):
    def __init__(self, cfg: RWKVConfig, layer_id: int):
        super().__init__()
        C, H, N = cfg.n_embd, cfg.n_head, cfg.head_size
        self.n_head, self.head_size, self.layer_id = H, N, layer_id
        ratio_0_to_1 = layer_id / max(cfg.n_layer - 1, 1)
        ratio_1_to_0 = 1.0 - layer_id / cfg.n_layer
        ramp = ratio_ramp(C).view(1, 1, C)
        self.x_r = nn.Parameter(1.0 - ramp ** (0.2 * ratio_1_to_0))
        self.x_w = nn.Parameter(1.0 - ramp ** (0.9 * ratio_1_to_0))
        self.x_k = nn.Parameter(1.0 - ramp ** (0.7 * ratio_1_to_0))
        self.x_v = nn.Parameter(1.0 - ramp ** (0.7 * ratio_1_to_0))
        self.x_a = nn.Parameter(1.0 - ramp ** (0.9 * ratio_1_to_0))
        self.x_g = nn.Parameter(1.0 - ramp ** (0.2 * ratio_1_to_0))
        n = torch.arange(C, dtype=torch.float32)
        decay = -7 + 5 * (n / max(C - 1, 1)) ** (0.85 + 1.0 * ratio_0_to_1**0.5)
        self.w0 = nn.Parameter(decay.view(1, 1, C) + 0.5)
        self.w1 = nn.Parameter(torch.zeros(C, cfg.d_decay_lora))
        self.w2 = nn.Parameter(torch.empty(cfg.d_decay_lora, C).uniform_(-0.01, 0.01))
        self.a0 = nn.Parameter(torch.zeros(1, 1, C))
        self.a1 = nn.Parameter(torch.zeros(C, cfg.d_aaa_lora))
        self.a2 = nn.Parameter(torch.empty(cfg.d_aaa_lora, C).uniform_(-0.01, 0.01))
        self.v0 = nn.Parameter(torch.ones(1, 1, C))
        self.v1 = nn.Parameter(torch.zeros(C, cfg.d_mv_lora))
        self.v2 = nn.Parameter(torch.empty(cfg.d_mv_lora, C).uniform_(-0.01, 0.01))
        self.g1 = nn.Parameter(torch.zeros(C, cfg.d_gate_lora))
        self.g2 = nn.Parameter(torch.empty(cfg.d_gate_lora, C).uniform_(-0.01, 0.01))
        self.k_k = nn.Parameter(torch.full((1, 1, C), 0.85))
        self.k_a = nn.Parameter(torch.ones(1, 1, C))
        self.r_k = nn.Parameter(torch.full((H, N), -0.04))
        self.receptance = nn.Linear(C, C, bias=False)
        self.key = nn.Linear(C, C, bias=False)
        self.value = nn.Linear(C, C, bias=False)
        self.output = nn.Linear(C, C, bias=False)
        self.ln_x = nn.GroupNorm(H, C, eps=64e-5)
        self.shift_probe = nn.Identity()  # hook point: calibration reads the token-shift difference here

    def forward(self, x, last_x, S, v_first):
        B, T, C = x.shape
        H, N = self.n_head, self.head_size
        xx = self.shift_probe(token_shift(x, last_x))
        xr, xw, xk = x + xx * self.x_r, x + xx * self.x_w, x + xx * self.x_k
        xv, xa, xg = x + xx * self.x_v, x + xx * self.x_a, x + xx * self.x_g
        r = self.receptance(xr)
        w = -F.softplus(-(self.w0 + torch.tanh(xw @ self.w1) @ self.w2)) - 0.5
        k = self.key(xk)
        v = self.value(xv)
        if self.layer_id == 0:
            v_first = v
        else:
            v = v + (v_first - v) * torch.sigmoid(self.v0 + (xv @ self.v1) @ self.v2)
        a = torch.sigmoid(self.a0 + (xa @ self.a1) @ self.a2)
        g = torch.sigmoid(xg @ self.g1) @ self.g2
        kk = F.normalize((k * self.k_k).view(B, T, H, N), dim=-1, p=2.0)
        k = k * (1 + (a - 1) * self.k_a)
        heads = lambda z: z.view(B, T, H, N)  # noqa: E731
        y, S = wkv7_scan(heads(r), -torch.exp(heads(w)), heads(k), heads(v), kk, heads(a), S)
        y = group_norm_heads(y.reshape(B, T, C), H, self.ln_x.weight, self.ln_x.bias)
        bonus = (heads(r) * heads(k) * self.r_k).sum(-1, keepdim=True) * heads(v)
        return self.output((y + bonus.reshape(B, T, C)) * g), x[:, -1], S, v_first


class ChannelMix7(nn.Module):
    def __init__(self, cfg: RWKVConfig, layer_id: int):
        super().__init__()
        C = cfg.n_embd
        ratio_1_to_0 = 1.0 - layer_id / cfg.n_layer
        self.x_k = nn.Parameter(1.0 - ratio_ramp(C).view(1, 1, C) ** (ratio_1_to_0**4))
        self.key = nn.Linear(C, cfg.dim_ffn, bias=False)
        self.value = nn.Linear(cfg.dim_ffn, C, bias=False)
        self.shift_probe = nn.Identity()

    def forward(self, x, last_x):
        xx = self.shift_probe(token_shift(x, last_x))
        k = torch.relu(self.key(x + xx * self.x_k)) ** 2
        return self.value(k), x[:, -1]


class RWKV7(RWKVModel):
    """RWKV-7 language model. ``forward(idx, state)`` -> (logits (B, T, V), new state).

    ``carry`` is v_first, the first layer's values, mixed into every later layer (value residual).
    """

    version = 7
    time_mix = TimeMix7
    channel_mix = ChannelMix7

    def _time_mix(self, att, x, last_x, wkv, recurrent, carry):
        return att(x, last_x, wkv, carry)
