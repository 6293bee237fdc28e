"""What RWKV-6 and RWKV-7 share: the size config, the recurrent state, and small helpers.

The state of one sequence is three tensors, the same for both versions, so decoders, the ONNX
export and the tests treat them alike:

- ``att_x``  (L, B, C): the last input of each layer's time mix (for the token shift),
- ``ffn_x``  (L, B, C): the last input of each layer's channel mix,
- ``wkv``    (L, B, H, N, N): the per-head matrix state (v6: [key, value]; v7: [value, key]).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from edgesmith.common import Config, EdgesmithError
from edgesmith.common.checks import is_int

VERSIONS = (6, 7)
LN_X_EPS = 64e-5  # 1e-5 * head_size_divisor**2 with the official divisor 8


class RWKVState(NamedTuple):
    att_x: torch.Tensor
    ffn_x: torch.Tensor
    wkv: torch.Tensor


@dataclass
class RWKVConfig(Config):
    """Sizes of an RWKV model. LoRA widths of 0 mean "the official default for this width"."""

    version: int = 7
    n_layer: int = 2
    n_embd: int = 128
    head_size: int = 32
    vocab_size: int = 256
    dim_ffn: int = 0
    d_mix_lora: int = 0  # v6 time_maa_w1/w2
    d_decay_lora: int = 0  # v6 time_decay_w1/w2, v7 w1/w2
    d_aaa_lora: int = 0  # v7 a1/a2
    d_mv_lora: int = 0  # v7 v1/v2
    d_gate_lora: int = 0  # v7 g1/g2

    def __post_init__(self):
        super().__post_init__()
        self._fill_defaults()

    def validate(self) -> None:
        if self.version not in VERSIONS:
            self._fail("version", f"is {self.version!r}", "use 6 or 7.")
        for name in ("n_layer", "n_embd", "head_size", "vocab_size"):
            v = getattr(self, name)
            if not is_int(v, 1):
                self._fail(name, f"is {v!r}", "use a positive whole number.")
        if self.n_embd % self.head_size:
            self._fail("n_embd", f"({self.n_embd}) is not a multiple of head_size ({self.head_size})",
                       "pick n_embd = heads * head_size.")
        for f in dataclasses.fields(self):
            if f.name.startswith("d") and f.name != "version":
                v = getattr(self, f.name)
                if not is_int(v, 0):
                    self._fail(f.name, f"is {v!r}", "use 0 (official default) or a positive whole number.")

    def _fill_defaults(self) -> None:
        c = self.n_embd
        if self.version == 6:
            self.dim_ffn = self.dim_ffn or int(3.5 * c) // 32 * 32
            self.d_mix_lora = self.d_mix_lora or (32 if c < 4096 else 64)
            self.d_decay_lora = self.d_decay_lora or (64 if c < 4096 else 128)
        else:
            self.dim_ffn = self.dim_ffn or 4 * c
            self.d_decay_lora = self.d_decay_lora or max(32, int(round(1.8 * c**0.5 / 32) * 32))
            self.d_aaa_lora = self.d_aaa_lora or max(32, int(round(1.8 * c**0.5 / 32) * 32))
            self.d_mv_lora = self.d_mv_lora or max(32, int(round(1.3 * c**0.5 / 32) * 32))
            self.d_gate_lora = self.d_gate_lora or max(32, int(round(0.6 * c**0.8 / 32) * 32))

    @property
    def n_head(self) -> int:
        return self.n_embd // self.head_size



def zero_state(cfg: RWKVConfig, batch: int, device=None, dtype=torch.float32) -> RWKVState:
    """The state before the first token: all zeros (as the official code starts)."""
    L, C, H, N = cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.head_size
    return RWKVState(torch.zeros(L, batch, C, device=device, dtype=dtype),
                     torch.zeros(L, batch, C, device=device, dtype=dtype),
                     torch.zeros(L, batch, H, N, N, device=device, dtype=dtype))


def token_shift(x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """x_{t-1} - x_t for a (B, T, C) sequence whose token before the first is ``last`` (B, C)."""
    if x.shape[1] == 1:  # the decoding step: no concatenation (one node fewer per mix in the step graph)
        return last.unsqueeze(1) - x
    prev = torch.cat([last.unsqueeze(1), x[:, :-1]], dim=1)
    return prev - x


def stack_time(ys: list[torch.Tensor]) -> torch.Tensor:
    """Per-token outputs (B, ...) -> (B, T, ...); one token (the decoding step) is an unsqueeze, not a stack, so
    the step graph has one node there instead of an unsqueeze per token and a concat."""
    return ys[0].unsqueeze(1) if len(ys) == 1 else torch.stack(ys, dim=1)


def to_chunks(chunk: int, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """(B, T, H, N) sequences -> (B, H, C, chunk, N) blocks of ``chunk`` tokens, the tail padded with zeros (for
    the chunked WKVs: a zero token has no decay, no update and no output)."""
    B, T, H, N = tensors[0].shape
    pad = (-T) % chunk
    C = (T + pad) // chunk
    if pad:
        tensors = [F.pad(t, (0, 0, 0, 0, 0, pad)) for t in tensors]
    return [t.view(B, C, chunk, H, N).permute(0, 3, 1, 2, 4) for t in tensors]


def from_chunks(y: torch.Tensor, T: int) -> torch.Tensor:
    """(B, H, C, chunk, N) blocks -> the (B, T, H, N) sequence, padding dropped; undoes ``to_chunks``."""
    B, H, C, L, N = y.shape
    return y.permute(0, 2, 3, 1, 4).reshape(B, C * L, H, N)[:, :T]


def group_norm_heads(y: torch.Tensor, n_head: int, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The official ln_x: GroupNorm with one group per head over (..., C), eps 64e-5."""
    shape = y.shape
    out = F.group_norm(y.reshape(-1, shape[-1]), n_head, weight, bias, eps=LN_X_EPS)
    return out.reshape(shape)


def vec(c: int, fill: float = 0.0) -> torch.nn.Parameter:
    """A per-channel vector in the official (1, 1, C) shape."""
    return torch.nn.Parameter(torch.full((1, 1, c), float(fill)))


def ratio_ramp(c: int) -> torch.Tensor:
    """0 .. (c-1)/c over the channels, the ramp the official initialisation is built from."""
    return torch.arange(c, dtype=torch.float32) / max(c, 1)


def check_tokens(idx: torch.Tensor, vocab_size: int) -> torch.Tensor:
    if idx.dtype not in (torch.int64, torch.int32):
        raise EdgesmithError(f"token ids have dtype {idx.dtype}.", "pass integer token ids (int64).")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise EdgesmithError(f"token ids must lie in [0, {vocab_size}) but range over "
                             f"[{int(idx.min())}, {int(idx.max())}].", "tokenize with the model's tokenizer.")
    return idx.long()


def lora_init_scale(fan: int) -> float:
    return 1.0 / math.sqrt(max(fan, 1))


class RWKVBlock(nn.Module):
    """One layer with the official key names: ln0 (layer 0 only), ln1, ln2, att (time mix), ffn (channel mix)."""

    def __init__(self, cfg: RWKVConfig, layer_id: int, time_mix: type[nn.Module], channel_mix: type[nn.Module]):
        super().__init__()
        C = cfg.n_embd
        if layer_id == 0:
            self.ln0 = nn.LayerNorm(C)
        self.ln1 = nn.LayerNorm(C)
        self.ln2 = nn.LayerNorm(C)
        self.att = time_mix(cfg, layer_id)
        self.ffn = channel_mix(cfg, layer_id)


class RWKVModel(nn.Module):
    """What both versions' language models share: embedding, blocks, head, the layer loop, the step form.

    Subclasses set ``version``, ``time_mix`` and ``channel_mix`` and say, in ``_time_mix``, how a layer's
    time mix is called (RWKV-7 threads the first layer's values through every layer as ``carry``).
    ``forward(idx, state)`` -> (logits (B, T, V), new state).
    """

    version: int
    time_mix: type[nn.Module]
    channel_mix: type[nn.Module]

    def __init__(self, cfg: RWKVConfig):
        super().__init__()
        if cfg.version != self.version:
            raise ValueError(f"{type(self).__name__} needs a version-{self.version} config")
        self.cfg = cfg
        self.emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        nn.init.uniform_(self.emb.weight, -1e-4, 1e-4)
        self.blocks = nn.ModuleList(RWKVBlock(cfg, i, self.time_mix, self.channel_mix) for i in range(cfg.n_layer))
        self.ln_out = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        for blk in self.blocks:  # zero output projections: each block starts as the identity (official init)
            nn.init.zeros_(blk.att.output.weight)
            nn.init.zeros_(blk.ffn.value.weight)

    state_batch_dim = 1  # RWKVState tensors are (layers, batch, ...): export-step-onnx moves batch first
    # ... and gives every layer's slice its own graph input, so the step reads and writes each layer's state in
    # place of gathering from and stacking into one tensor (a copy of the whole state per token)
    state_layer_dim = 0

    init_wkv = None  # (L, H, N, N): a state-tuned checkpoint's trained starting wkv state, else zeros

    def zero_state(self, batch: int) -> RWKVState:
        """The state before the first token: zeros, with the trained initial wkv state where there is one."""
        st = zero_state(self.cfg, batch, device=self.emb.weight.device, dtype=self.emb.weight.dtype)
        if self.init_wkv is not None:
            st = RWKVState(st.att_x, st.ffn_x, self.init_wkv[:, None].to(st.wkv).expand_as(st.wkv).clone())
        return st

    def _time_mix(self, att: nn.Module, x, last_x, wkv, recurrent: bool, carry):
        """Run one time mix; returns (dx, last input, new wkv state, carry for the next layer)."""
        raise NotImplementedError

    def forward(self, idx: torch.Tensor, state: RWKVState | None = None, recurrent: bool = False):
        idx = check_tokens(idx, self.cfg.vocab_size)
        x = self.emb(idx)
        if state is None:
            state = self.zero_state(idx.shape[0])
        att_x, ffn_x, wkv = [], [], []
        carry = None
        for i in range(len(self.blocks)):
            x, (ax, fx, S), carry = self.run_block(i, x, (state.att_x[i], state.ffn_x[i], state.wkv[i]), recurrent,
                                                   carry)
            att_x.append(ax), ffn_x.append(fx), wkv.append(S)
        logits = self.head(self.ln_out(x))
        # a state given as per-layer lists (export-step-onnx's layout, see ``state_layer_dim``) comes back as lists
        stack = torch.stack if isinstance(state.wkv, torch.Tensor) else list
        return logits, RWKVState(stack(att_x), stack(ffn_x), stack(wkv))

    def run_block(self, i: int, x: torch.Tensor, state: tuple, recurrent: bool = False, carry=None):
        """Block i alone: x is the residual stream entering it (block 0 applies ln0 first), state its (att_x,
        ffn_x, wkv), carry what the block before passed on (RWKV-7: the first layer's values). Returns (x leaving
        it, its new (att_x, ffn_x, wkv), carry for block i + 1): ``forward`` is these, block after block."""
        blk = self.blocks[i]
        if i == 0:
            x = blk.ln0(x)
        att_x, ffn_x, wkv = state
        dx, ax, S, carry = self._time_mix(blk.att, blk.ln1(x), att_x, wkv, recurrent, carry)
        x = x + dx
        dx, fx = blk.ffn(blk.ln2(x), ffn_x)
        return x + dx, (ax, fx, S), carry

    def step(self, token: torch.Tensor, state: RWKVState):
        """One token per sequence: token (B,) -> logits (B, V), new state. The decoding form."""
        logits, state = self.forward(token.view(-1, 1), state, recurrent=True)
        return logits[:, 0], state
