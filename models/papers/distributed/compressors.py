"""Communication compressors and error feedback, on flat float32 tensors.

A compressor turns a tensor into a *payload*: the list of tensors a worker actually puts on the wire
(top-k: the k values as float32 and their indices as int32; b-bit quantization: one float32 scale
and the codes packed ``8 // b`` to a byte). ``decompress`` rebuilds a dense tensor from a payload, so
``apply(x) = decompress(compress(x))`` is the operator C(x) of the papers. Because the payload is
what the collectives carry, counting the elements of every collective times their element size
gives the true bytes sent.

Error feedback (``ErrorFeedback``) keeps per-key state so a compressor's bias does not accumulate:

* ``ef14`` (Seide et al. 2014; the form in the EF-Landing notes, and the DEFAULT here):
  m = C(e + x); e <- e + x - m. The worker sends m; the receiver averages the m's. Whatever C drops
  stays in e and is sent later, so the sum of what was sent tracks the sum of the inputs.
* ``ef21`` (Richtarik et al. 2021): the worker keeps g (its last estimate of its own input) and sends
  m = C(x - g); g <- g + m. Every receiver keeps the running mean G <- G + mean(m), which tracks
  mean(x) itself (not a sum), so EF21 suits compressing the *field/gradient* directly.
* ``none``: m = C(x), no memory (biased for top-k; the ablation that stalls).

Both EF forms need no extra communication: only m travels.
"""
from __future__ import annotations

import math

import torch

from edgesmith.common import EdgesmithError

EF_MODES = ("ef14", "ef21", "none")


class Compressor:
    """C(x): ``compress`` gives the payload tensors, ``decompress`` the dense tensor back."""

    name = "compressor"

    def compress(self, x: torch.Tensor, generator: torch.Generator | None = None) -> list[torch.Tensor]:
        raise NotImplementedError

    def decompress(self, payload: list[torch.Tensor], numel: int) -> torch.Tensor:
        raise NotImplementedError

    def apply(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        flat = x.reshape(-1).to(torch.float32)
        return self.decompress(self.compress(flat, generator), flat.numel()).reshape(x.shape)

    def payload_bytes(self, numel: int) -> int:
        """Bytes one worker sends for a tensor of ``numel`` elements."""
        probe = self.compress(torch.ones(numel), torch.Generator().manual_seed(0))
        return sum(t.numel() * t.element_size() for t in probe)

    def describe(self) -> str:
        return self.name


class Identity(Compressor):
    """No compression: the float32 tensor itself."""

    name = "identity"

    def compress(self, x, generator=None):
        return [x.reshape(-1).to(torch.float32)]

    def decompress(self, payload, numel):
        return payload[0].reshape(-1)


class TopK(Compressor):
    """Keep the ``ratio`` fraction of entries largest in magnitude (at least one); send values + int32 indices."""

    def __init__(self, ratio: float):
        if not 0.0 < ratio <= 1.0:
            raise EdgesmithError(f"top-k ratio {ratio} is outside (0, 1].", "pass a fraction such as 0.1 for 10%.")
        self.ratio = float(ratio)
        self.name = f"top-{self.ratio:g}"

    def k(self, numel: int) -> int:
        return max(1, min(numel, math.ceil(self.ratio * numel)))

    def compress(self, x, generator=None):
        flat = x.reshape(-1).to(torch.float32)
        idx = torch.topk(flat.abs(), self.k(flat.numel()), sorted=False).indices
        idx, _ = torch.sort(idx)  # sorted indices make the payload deterministic for ties
        return [flat[idx].contiguous(), idx.to(torch.int32)]

    def decompress(self, payload, numel):
        out = torch.zeros(numel, dtype=torch.float32)
        out[payload[1].long()] = payload[0]
        return out


class Quantize(Compressor):
    """b-bit uniform quantization on [-s, s], s = max|x| sent as one float32.

    ``stochastic=True`` rounds up with probability equal to the fractional part (unbiased:
    E[C(x)] = x); ``False`` rounds to nearest (biased but lower variance). Codes are packed
    ``8 // bits`` to a byte, so bits must divide 8.
    """

    def __init__(self, bits: int, stochastic: bool = True):
        if bits not in (1, 2, 4, 8):
            raise EdgesmithError(f"quantization to {bits} bits is not supported.", "use 1, 2, 4 or 8 bits.")
        self.bits, self.stochastic = int(bits), bool(stochastic)
        self.levels = (1 << self.bits) - 1
        self.name = f"q{self.bits}-{'stoch' if stochastic else 'det'}"

    def compress(self, x, generator=None):
        flat = x.reshape(-1).to(torch.float32)
        scale = flat.abs().max().clamp_min(1e-30)
        pos = (flat / scale + 1.0) * (self.levels / 2.0)  # in [0, levels]
        if self.stochastic:
            u = torch.rand(flat.numel(), generator=generator)
            codes = torch.floor(pos + u)
        else:
            codes = torch.round(pos)
        codes = codes.clamp(0, self.levels).to(torch.uint8)
        return [scale.reshape(1), self._pack(codes)]

    def decompress(self, payload, numel):
        scale, packed = payload
        codes = self._unpack(packed, numel).to(torch.float32)
        return (codes * (2.0 / self.levels) - 1.0) * scale

    def _pack(self, codes: torch.Tensor) -> torch.Tensor:
        per = 8 // self.bits
        pad = (-codes.numel()) % per
        c = torch.cat([codes, codes.new_zeros(pad)]).reshape(-1, per).to(torch.int32)
        shifts = torch.arange(per, dtype=torch.int32) * self.bits
        return (c << shifts).sum(dim=1).to(torch.uint8)

    def _unpack(self, packed: torch.Tensor, numel: int) -> torch.Tensor:
        per = 8 // self.bits
        shifts = torch.arange(per, dtype=torch.int32) * self.bits
        c = (packed.to(torch.int32).reshape(-1, 1) >> shifts) & self.levels
        return c.reshape(-1)[:numel]


def make_compressor(spec: str) -> Compressor:
    """Parse ``identity``, ``topk:0.1``, ``quant:4`` (stochastic) or ``quant:4:det``."""
    parts = spec.split(":")
    try:
        if parts[0] == "identity" and len(parts) == 1:
            return Identity()
        if parts[0] == "topk" and len(parts) == 2:
            return TopK(float(parts[1]))
        if parts[0] == "quant" and len(parts) in (2, 3):
            mode = parts[2] if len(parts) == 3 else "stoch"
            if mode not in ("stoch", "det"):
                raise ValueError(mode)
            return Quantize(int(parts[1]), stochastic=mode == "stoch")
    except ValueError:
        pass
    raise EdgesmithError(f"unknown compressor {spec!r}.",
                         "use identity, topk:RATIO (e.g. topk:0.1), quant:BITS or quant:BITS:det.")


class ErrorFeedback:
    """Per-key error-feedback memory around a compressor (see the module docstring for the modes).

    ``message(key, x)`` returns the dense value of what this worker sends (and the payload to put on
    the wire); ``combine(key, mean_message)`` turns the average of all workers' messages into the
    estimate the receiver uses: the mean itself for ``ef14``/``none``, the running mean for ``ef21``.
    """

    def __init__(self, compressor: Compressor, mode: str = "ef14"):
        if mode not in EF_MODES:
            raise EdgesmithError(f"unknown error-feedback mode {mode!r}.", f"use one of: {', '.join(EF_MODES)}.")
        self.compressor, self.mode = compressor, mode
        self.error: dict = {}  # ef14: what was not sent yet
        self.local: dict = {}  # ef21: this worker's estimate g_i of its own input
        self.global_: dict = {}  # ef21: the receiver's running mean G

    def message(self, key, x: torch.Tensor, generator: torch.Generator | None = None):
        flat = x.reshape(-1).to(torch.float32)
        n = flat.numel()
        if self.mode == "ef14":
            e = self._state(self.error, key, n)
            v = e + flat
            payload = self.compressor.compress(v, generator)
            m = self.compressor.decompress(payload, n)
            self.error[key] = v - m
        elif self.mode == "ef21":
            g = self._state(self.local, key, n)
            payload = self.compressor.compress(flat - g, generator)
            m = self.compressor.decompress(payload, n)
            self.local[key] = g + m
        else:
            payload = self.compressor.compress(flat, generator)
            m = self.compressor.decompress(payload, n)
        return m, payload

    def combine(self, key, mean_message: torch.Tensor) -> torch.Tensor:
        if self.mode != "ef21":
            return mean_message
        g = self._state(self.global_, key, mean_message.numel()) + mean_message
        self.global_[key] = g
        return g

    @staticmethod
    def _state(store: dict, key, n: int) -> torch.Tensor:
        t = store.get(key)
        if t is None or t.numel() != n:  # new key, or DDP rebuilt its buckets: start from zero memory
            t = torch.zeros(n, dtype=torch.float32)
            store[key] = t
        return t
