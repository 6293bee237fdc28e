"""``token-lm``: token ids in, logits out, with a recurrent state; perplexity; decode speed in tokens/s.

A torch module of this kind has ``forward(tokens (B, T) int64) -> logits (B, T, V)`` (from the zero
state), ``zero_state(batch)`` and ``step(token (B,), state) -> (logits (B, V), state)``, the state being
a NamedTuple of tensors; ``export-step-onnx`` turns ``step`` into an ONNX graph whose state travels
as inputs and outputs. A decode step is timed at each batch size (one new token per sequence).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from edgesmith.models.kinds.base import Kind, KindOptions, Speed, option, register_kind
from edgesmith.common.checks import is_int

METHODS = ("rwkv-rtn", "rwkv-gptq", "rwkv-gptvq", "rwkvquant")
DECODERS = ("onnxruntime", "rwkv-c")
PROXIES = ("paper", "max-rms", "oracle")  # RWKVQuant's decision rules (compress.rwkvquant.PROXIES)


@dataclass(frozen=True)
class TokenLmOptions(KindOptions):
    methods: tuple[str, ...] = option(METHODS, "weight quantizers to compare (pass kinds)")
    bits: tuple[int, ...] = option((3, 4), "code bits of each quantizer (about 3.3 / 4.3 bits per weight)")
    group_size: int = option(64, "weights per scale of scalar quantization")
    sq_percentile: float = option(90.0, "RWKVQuant's threshold percentile (share of matrices below tau, per proxy)")
    proxy: str = option("paper", "RWKVQuant's SQ/VQ rule: paper (P_c, P_f), max-rms (the released code's) or oracle "
                                 "(each matrix's lower Hessian-weighted error of GPTQ and GPTVQ, in hindsight)")
    quantize_vectors: bool = option(True, "codebook-quantize the token-shift multiplication vectors (every method)")
    symmetric: bool = option(False, "symmetric scalar grids (no zero points stored; faster MatMulNBits on CPU)")
    vq_scale_block: int = option(0, "GPTVQ's blockwise data normalisation of every VQ matrix (GPTVQ's and "
                                    "RWKVQuant's): columns per 4-bit scale (0 = off; the paper's scripts: 32)")
    sequential: bool = option(False, "block-sequential calibration for the calibrated quantizers: each block's "
                                     "Hessians from the quantized blocks before it (reference GPTQ's way)")
    decoders: tuple[str, ...] = option(("onnxruntime",), "where each variant decodes: onnxruntime (its step graph) "
                                                          "and/or rwkv-c (the C decoder of RWKV-6/7, export-rwkv-c)")

    def validate(self) -> None:
        methods, bits = tuple(self.methods), tuple(self.bits)
        if not methods or any(m not in METHODS for m in methods):
            self._fail("methods", f"is {list(methods)!r}", f"choose from {', '.join(METHODS)}.")
        if not bits or any(isinstance(b, bool) or b not in (2, 3, 4, 5, 6, 8) for b in bits):
            self._fail("bits", f"is {list(bits)!r}", "use code bits such as 3 and 4.")
        g = self.group_size
        if not is_int(g, 16) or g & (g - 1):
            self._fail("group_size", f"is {g!r}", "use a power of two of at least 16, e.g. 64.")
        p = self.sq_percentile
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 100:
            self._fail("sq_percentile", f"is {p!r}", "use a percentile in (0, 100], e.g. 90.")
        if self.proxy not in PROXIES:
            self._fail("proxy", f"is {self.proxy!r}", f"use one of {', '.join(PROXIES)}.")
        b = self.vq_scale_block
        if not is_int(b, 0) or b % 2 or b > 4096:
            self._fail("vq_scale_block", f"is {b!r}", "use an even number of columns up to 4096, e.g. 32, or 0 (off).")
        decoders = tuple(self.decoders)
        if not decoders or any(d not in DECODERS for d in decoders) or len(set(decoders)) != len(decoders):
            self._fail("decoders", f"is {list(decoders)!r}", f"choose one or both of {', '.join(DECODERS)}.")
        for name in ("quantize_vectors", "symmetric", "sequential"):
            if not isinstance(getattr(self, name), bool):
                self._fail(name, f"is {getattr(self, name)!r}", "use true or false.")


@register_kind
class TokenLmKind(Kind):
    name = "token-lm"
    description = "token ids in, logits out, recurrent state; metric perplexity; decode speed in tokens/s"
    unit = "token"
    default_batch_sizes = (1,)
    default_n_calibration = 64
    variable_length = True
    probe_samples = 4  # logits of a 65,536-word vocabulary are 0.25 GB per 4 windows of 128 tokens
    export_pass = "export-step-onnx"
    Options: ClassVar = TokenLmOptions
    required = (("vocab_size", "number of token ids the model takes"),)

    def speed(self, p50_s: float, batch: int, producer, artifact) -> Speed:
        return Speed("decode", batch / p50_s, "tokens/s")
