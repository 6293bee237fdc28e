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

The sequence form computes every projection for all tokens at once and runs the matrix state
32 tokens at a time in the WY (chunked) form of the delta rule (``wkv7_chunked``): a few batched
matrix products per chunk in place of 32 small steps (training-step times of both forms:
``bench/studies/rwkv_train_speed.py``). The step form runs the cell on one token
(``wkv7_scan``); the two agree to rounding.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.models.rwkv.base import (RWKVConfig, RWKVModel, from_chunks, group_norm_heads, ratio_ramp, stack_time,
                                       to_chunks, token_shift)


CHUNK = 32  # tokens per chunk: 1.4-1.8x faster than 16 on a CPU, fp32 error within 2x of the scan's


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


def unit_lower_inverse(m: torch.Tensor) -> torch.Tensor:
    """(I - m)^-1 for strictly lower-triangular m (..., L, L): the Neumann series, which ends because m^L = 0,
    summed by repeated squaring, (I + m)(I + m^2)(I + m^4)... Matrix products only: it runs as batched GEMMs
    on any device and exports to ONNX, where a triangular solve does neither well."""
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
    inv, power, reach = eye + m, m, 2
    while reach < m.shape[-1]:
        power = power @ power
        inv = inv @ (eye + power)  # now m^0 + m^1 + ... + m^(2 reach - 1)
        reach *= 2
    return inv


def wkv7_chunked(r, logw, k, v, kk, a, S, chunk: int = CHUNK):
    """The same delta rule as ``wkv7_scan``, ``chunk`` tokens at a time with matrix products.

    Per head, with b = -kk, c = kk*a and the transition A_t = diag(decay_t) + b_t c_t^T acting on the key side,
    S_t = S_{t-1} A_t + v_t k_t^T. Inside a chunk that starts from S0, with g_t the inclusive cumulative log-decay:

        S_t = S0 diag(e^g_t) + sum_{i<=t} (x_i c_i^T + v_i k_i^T) diag(e^(g_t - g_i)),   x_i = S_{i-1} b_i
        X = (I - tril(b~ c^^T, -1))^-1 (b~ S0^T + tril(b~ k^^T, -1) V)    b~ = b e^(g_{t-1}), c^ = c e^-g, k^ = k e^-g
        Y = r~ S0^T + tril(r~ c^^T) X + tril(r~ k^^T) V                      r~ = r e^g

    (the WY form of a product of identity-plus-rank-one matrices, as in the chunked DeltaNet / RWKV-7 kernels).
    X and Y are affine in S0, so every chunk's coefficients come from batched matrix products (the inverse by
    ``unit_lower_inverse``), and only S_end = S0 (diag(e^g_L) + P) + Q runs chunk after chunk. RWKV-7 bounds each
    log-decay below by -e^-0.5 (w <= -0.5), so within a chunk of 32 no factor e^-g exceeds e^19.4: far from fp32's
    range, and each product term keeps its relative precision (``wkv7_scan`` takes any decay).
    """
    T = r.shape[1]
    r, logw, k, v, kk, a = to_chunks(chunk, r, logw, k, v, kk, a)  # (B, H, C, L, N); padding: b = c = k = v = r = 0
    C = r.shape[2]
    b, c = -kk, kk * a
    g = torch.cumsum(logw, dim=3)
    g_last = g[:, :, :, -1:]
    b_t, r_t = b * torch.exp(g - logw), r * torch.exp(g)
    to_start = torch.exp(-g)
    c_h, k_h = c * to_start, k * to_start
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=r.device).tril(-1)
    incl = torch.ones(chunk, chunk, dtype=torch.bool, device=r.device).tril()
    lower = lambda m, mask: m.masked_fill(~mask, 0.0)  # noqa: E731
    m_bc, m_bk = lower(b_t @ c_h.transpose(-1, -2), strict), lower(b_t @ k_h.transpose(-1, -2), strict)
    m_rc, m_rk = lower(r_t @ c_h.transpose(-1, -2), incl), lower(r_t @ k_h.transpose(-1, -2), incl)
    inv = unit_lower_inverse(m_bc)
    W, U = inv @ b_t, inv @ (m_bk @ v)  # X = W S0^T + U
    to_end = torch.exp(g_last - g)
    c_end, k_end = c * to_end, k * to_end
    # S_end = S0 diag(e^g_last) + S0 P + Q
    decay, P = torch.exp(g_last), W.transpose(-1, -2) @ c_end
    Q = U.transpose(-1, -2) @ c_end + v.transpose(-1, -2) @ k_end
    starts = []
    for i in range(C):
        starts.append(S)
        S = S * decay[:, :, i] + S @ P[:, :, i] + Q[:, :, i]
    S0 = torch.stack(starts, dim=2)  # (B, H, C, N, N): the state entering each chunk
    y = (r_t + m_rc @ W) @ S0.transpose(-1, -2) + m_rc @ U + m_rk @ v
    return from_chunks(y, T), S


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

    def forward(self, x, last_x, S, v_first, recurrent: bool = False):
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
        wkv = wkv7_scan if recurrent or T == 1 else wkv7_chunked
        y, S = wkv(heads(r), -torch.exp(heads(w)), heads(k), heads(v), kk, heads(a), S)
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
        return att(x, last_x, wkv, carry, recurrent)
