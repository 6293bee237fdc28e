"""One framework for RTN, GPTQ, GPTVQ and RWKVQuant on RWKV-6/7, so all compare in one run.

``quantize_rwkv(model, calibration_tokens, config)`` returns a copy of the model whose block
linears (receptance/key/value/output/gate, ffn key/receptance/value) are ``QuantLinear`` modules
(dequantize on the fly) plus a ``PassReport``. What stays in high precision: embedding, head,
layer norms, the LoRA matrices and decay parameters (the decay is applied recursively and is the
most sensitive part, as llama.cpp also keeps it). The element-wise multiplication (token-shift mix)
vectors are treated alike by every method: kept fp (``quantize_vectors=False``) or, by default,
``vector_bits`` 1-D codebooks, plain (unweighted) k-means for the baselines and the
importance-weighted codebook for RWKVQuant (its codebook optimisation is then the only
difference). Calibration: Hessians H = 2/n sum x x^T of every linear's own input and the clipped
E[x^2] of every token-shift difference, over training-split windows (never the evaluation split; the
producer hands only training text). By default from one pass of the fp model, the same for every
method, so all compare on equal Hessians; with ``sequential=True`` block-sequentially, as the
reference GPTQ and the released RWKVQuant code do: block i is calibrated on the outputs of blocks
0..i-1 already quantized (their linears and vectors), so each method's Hessians see its own errors.

Methods: ``rtn`` (group-wise SQ), ``gptq`` (SQ with Hessian feedback), ``gptvq`` (VQ for every
matrix), ``rwkvquant`` (per matrix P_c/P_f -> GPTQ or GPTVQ by percentile thresholds, plus
weighted codebooks for the multiplication vectors). RWKVQuant's SQ and VQ matrices go through the
very same ``gptq_quantize`` / ``gptvq_quantize`` calls as the GPTQ and GPTVQ baselines, so per
matrix it differs from them only by the decision. VQ codebooks are sized so a VQ matrix costs
about the same bits per weight as an SQ one (``vq_group_size=0``): the comparison is at matched bits.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from edgesmith.compress.base import Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.compress.rwkvquant.codebook import ShiftImportance, optimise_codebook, weighted_error
from edgesmith.compress.rwkvquant.gptq import gptq_quantize
from edgesmith.compress.rwkvquant.gptvq import gptvq_quantize
from edgesmith.compress.rwkvquant.proxies import coarse_proxy, decide, fine_proxy, max_over_rms, thresholds
from edgesmith.compress.rwkvquant.rtn import rtn_quantize
from edgesmith.compress.rwkvquant.tensors import CODEBOOK_BITS, FP16_BITS, QuantLinear, VecCodebook
from edgesmith.common import EdgesmithError
from edgesmith.common.checks import is_int

METHODS = ("rtn", "gptq", "gptvq", "rwkvquant")
PROXIES = ("paper", "max-rms", "oracle")
LINEAR_NAMES = {6: ("att.receptance", "att.key", "att.value", "att.output", "att.gate",
                    "ffn.key", "ffn.receptance", "ffn.value"),
                7: ("att.receptance", "att.key", "att.value", "att.output", "ffn.key", "ffn.value")}
# element-wise multiplication vectors driven by each block's token-shift difference
SHIFT_VECTORS = {6: {"att": ("time_maa_x", "time_maa_w", "time_maa_k", "time_maa_v", "time_maa_r", "time_maa_g"),
                     "ffn": ("time_maa_k", "time_maa_r")},
                 7: {"att": ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"), "ffn": ("x_k",)}}


@dataclass
class RWKVQuantBase(PassConfig):
    """Shared options. ``bits``: SQ code bits, and VQ index bits per weight. ``group_size``: SQ group.
    ``vq_dim``: VQ vector length. ``vq_group_size``: weights per VQ codebook (0 = match SQ overhead).
    ``vq_columns``: columns per GPTVQ column group (the paper's 256). ``kmeans_iters``: GPTVQ's EM iterations at
    most (the paper's 100). ``codebook_update_steps``: GPTVQ's codebook update after quantization (0 = off).
    ``sq_percentile``: RWKVQuant threshold percentile (share of layers that tends to get SQ).
    ``proxy``: "paper" (P_c and P_f), "max-rms" (released code's default, an ablation) or "oracle" (an ablation
    that bounds every decision rule: each matrix quantized both ways, GPTQ and GPTVQ, keeping the one with the lower
    Hessian-weighted error on the calibration inputs, in hindsight; twice the time).
    ``quantize_vectors``: codebook-quantize the multiplication vectors (every method; False keeps them fp).
    ``vector_bits``: their codebook bits. ``n_calibration``: sequences. ``act_order`` / ``static_groups``: the
    published GPTQ options for every GPTQ matrix (columns by decreasing Hessian diagonal / every group's grid
    fitted before any update); act-order needs static groups here (stored groups are runs of adjacent columns).
    ``symmetric``: RTN's and GPTQ's grids symmetric about zero (the reference quantizer's ``sym``): no zero points
    stored (one bit-width's worth per group less) and onnxruntime's MatMulNBits runs without them, faster on CPU.
    ``vq_scale_block``: GPTVQ's blockwise data normalisation over runs of that many columns (0 = off; the
    paper's scripts: 32), its scales stored in ``vq_scale_bits`` bits on a log grid; with ``vq_group_size=0``
    the codebooks serve more weights so that VQ's overhead, scales included, still matches SQ's.
    ``sequential``: block-sequential calibration (each block's Hessians and shift importances from the outputs
    of the blocks before it, already quantized; the reference GPTQ's and released RWKVQuant's way); off, one
    pass of the fp model serves every block (cheaper: L block passes instead of L(L+1)/2).
    """

    kind: ClassVar[str] = ""
    method: ClassVar[str] = ""
    contract_fixture: ClassVar[str] = "rwkv-torch"

    bits: int = 3
    group_size: int = 64
    vq_dim: int = 2
    vq_group_size: int = 0
    vq_columns: int = 256
    sq_percentile: float = 90.0
    proxy: str = "paper"
    max_rms_threshold: float = 8.0
    vector_bits: int = 3
    quantize_vectors: bool = True
    n_calibration: int = 64
    damp: float = 0.01
    kmeans_iters: int = 100
    codebook_update_steps: int = 5
    seed: int = 0
    act_order: bool = False
    static_groups: bool = False
    symmetric: bool = False
    vq_scale_block: int = 0
    vq_scale_bits: int = 4
    sequential: bool = False

    def validate(self) -> None:
        ints = {"bits": (2, 8), "group_size": (8, 4096), "vq_dim": (1, 4), "vq_group_size": (0, 10**7),
                "vector_bits": (1, 8), "n_calibration": (1, 10**6), "kmeans_iters": (1, 1000), "seed": (0, 2**31),
                "vq_columns": (1, 1 << 20), "codebook_update_steps": (0, 1000), "vq_scale_block": (0, 4096),
                "vq_scale_bits": (2, 8)}
        for name, (lo, hi) in ints.items():
            v = getattr(self, name)
            if not is_int(v, lo, hi):
                self._fail(name, f"is {v!r}", f"use a whole number from {lo} to {hi}.")
        if self.bits * self.vq_dim > 12:
            self._fail("bits", f"x vq_dim = {self.bits * self.vq_dim} index bits", "keep bits*vq_dim <= 12 (4096 centroids).")
        if not 0 < float(self.sq_percentile) <= 100:
            self._fail("sq_percentile", f"is {self.sq_percentile!r}", "use a percentile in (0, 100], e.g. 90.")
        if self.proxy not in PROXIES:
            self._fail("proxy", f"is {self.proxy!r}", f"use one of {', '.join(PROXIES)}.")
        if not 0 < float(self.damp) < 1:
            self._fail("damp", f"is {self.damp!r}", "use a fraction such as 0.01.")
        for name in ("quantize_vectors", "act_order", "static_groups", "symmetric", "sequential"):
            if not isinstance(getattr(self, name), bool):
                self._fail(name, f"is {getattr(self, name)!r}", "use true or false.")
        if self.vq_scale_block % self.vq_dim:
            self._fail("vq_scale_block", f"is {self.vq_scale_block}, not a multiple of vq_dim {self.vq_dim}",
                       "use a multiple of vq_dim (e.g. 32), or 0 for no normalisation.")
        if self.vq_scale_block and not self.vq_group_size and self.sq_overhead_bits() <= self.vq_scale_overhead_bits():
            self._fail("vq_scale_block", f"= {self.vq_scale_block} costs {self.vq_scale_overhead_bits():.3f} bits per "
                       f"weight in scales, no less than SQ's whole overhead ({self.sq_overhead_bits():.3f})",
                       "use a longer block, fewer vq_scale_bits, or set vq_group_size yourself.")
        if self.act_order and not self.static_groups:
            self._fail("act_order", "is set without static_groups",
                       "add static_groups=true (each stored group must stay a run of adjacent columns).")

    def sq_label(self) -> str:
        """``rtn`` or ``gptq``, with the published options in use named: ``gptq (act-order, static groups)``."""
        base = "rtn" if self.method == "rtn" else "gptq"
        opts = [] if base == "rtn" else [n for n, on in (("act-order", self.act_order),
                                                          ("static groups", self.static_groups)) if on]
        opts += ["symmetric"] if self.symmetric else []  # RTN's grid too
        return base + (f" ({', '.join(opts)})" if opts else "")


    def sq_overhead_bits(self) -> float:
        return (FP16_BITS + (0 if self.symmetric else self.bits)) / self.group_size

    def vq_scale_overhead_bits(self) -> float:
        """Bits per weight of the normalisation scales (the per-column fp16 grid ends aside: < 0.01 for >= 64 rows)."""
        return self.vq_scale_bits / self.vq_scale_block if self.vq_scale_block else 0.0

    def vq_weights_per_codebook(self) -> int:
        """Weights sharing one codebook; by default chosen so VQ pays the same overhead per weight as SQ
        (scales of the blockwise normalisation included)."""
        if self.vq_group_size:
            return self.vq_group_size
        cb_bits = 2 ** (self.bits * self.vq_dim) * self.vq_dim * CODEBOOK_BITS + 2 * FP16_BITS
        return int(round(cb_bits / (self.sq_overhead_bits() - self.vq_scale_overhead_bits())))


@dataclass
class RTNConfig(RWKVQuantBase):
    kind: ClassVar[str] = "rwkv-rtn"
    method: ClassVar[str] = "rtn"


@dataclass
class GPTQConfig(RWKVQuantBase):
    kind: ClassVar[str] = "rwkv-gptq"
    method: ClassVar[str] = "gptq"


@dataclass
class GPTVQConfig(RWKVQuantBase):
    kind: ClassVar[str] = "rwkv-gptvq"
    method: ClassVar[str] = "gptvq"


@dataclass
class RWKVQuantConfig(RWKVQuantBase):
    kind: ClassVar[str] = "rwkvquant"
    method: ClassVar[str] = "rwkvquant"


CONFIGS = {c.method: c for c in (RTNConfig, GPTQConfig, GPTVQConfig, RWKVQuantConfig)}


def make_config(method: str, **kw) -> RWKVQuantBase:
    if method not in CONFIGS:
        raise EdgesmithError(f"unknown RWKV quantization method {method!r}.", f"use one of {', '.join(METHODS)}.")
    return CONFIGS[method](**kw)


# --- calibration ---------------------------------------------------------------------------------

def linear_modules(model: nn.Module) -> dict[str, nn.Module]:
    version = model.cfg.version
    out = {}
    for i, blk in enumerate(model.blocks):
        for rel in LINEAR_NAMES[version]:
            part, name = rel.split(".")
            out[f"blocks.{i}.{rel}"] = getattr(getattr(blk, part), name)
    return out


@torch.no_grad()
def collect_calibration(model: nn.Module, tokens: np.ndarray, batch: int = 16, block: int | None = None,
                        inputs: list | None = None):
    """Input Hessians of every block linear and clipped shift importances, from the model as it is (the fp
    model, or with ``block`` given: that block's only, on the residual streams entering it, so the blocks before
    it contribute whatever they are, quantized or not). ``inputs`` are those streams kept by the caller
    (``block_inputs``, then ``advance_inputs`` through the blocks before ``block``): only the block runs; without
    them they are made here, through the blocks before it."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.number):
        raise EdgesmithError(f"calibration data has shape {tokens.shape}; expected (sequences, length) token ids.",
                             "pass windows of training text from the producer's calibration_data().")
    if inputs is not None and block is None:
        raise ValueError("collect_calibration: inputs are one block's; pass the block too")
    if block is not None and inputs is None:
        inputs = block_inputs(model, tokens, batch)
        for i in range(block):
            advance_inputs(model, i, inputs)
    prefix = "blocks." if block is None else f"blocks.{block}."
    H: dict[str, torch.Tensor] = {}
    n_rows: dict[str, int] = {}
    imp: dict[str, ShiftImportance] = {}
    hooks = []
    for name, mod in linear_modules(model).items():
        if not name.startswith(prefix):
            continue

        def pre(m, args, name=name):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).to(torch.float64)
            H[name] = H.get(name, 0) + 2 * x.t() @ x
            n_rows[name] = n_rows.get(name, 0) + x.shape[0]
        hooks.append(mod.register_forward_pre_hook(pre))
    for i, blk in enumerate(model.blocks):
        if block is not None and i != block:
            continue
        for part in ("att", "ffn"):
            key = f"blocks.{i}.{part}"
            imp[key] = ShiftImportance()
            hooks.append(getattr(blk, part).shift_probe.register_forward_hook(
                lambda m, a, out, key=key: imp[key].update(out)))
    # the head (65,536 logits per token on a World-vocabulary model) is not calibrated: stop before it
    if block is None:
        hooks.append(model.ln_out.register_forward_pre_hook(_stop_before_head))
    try:
        if block is not None:
            for x, carry in inputs:
                _run_block(model, block, x, carry)
        else:
            for i in range(0, len(tokens), batch):
                try:
                    model(torch.as_tensor(tokens[i:i + batch], dtype=torch.long))
                except _HeadReached:
                    pass
    finally:
        for h in hooks:
            h.remove()
    for k in H:  # in place: a second set of Hessians would double the peak memory (1 GB at 0.1B shape)
        H[k].div_(n_rows[k])
    return H, {k: v.value() for k, v in imp.items()}


@torch.no_grad()
def block_inputs(model: nn.Module, tokens: np.ndarray, batch: int = 16) -> list:
    """The residual stream entering block 0, per calibration batch of ``collect_calibration``: (x, carry)."""
    from edgesmith.models.rwkv.base import check_tokens

    return [(model.emb(check_tokens(torch.as_tensor(tokens[i:i + batch], dtype=torch.long), model.cfg.vocab_size)),
             None) for i in range(0, len(tokens), batch)]


@torch.no_grad()
def advance_inputs(model: nn.Module, block: int, inputs: list) -> None:
    """``inputs`` (entering ``block``) moved, in place, to the stream leaving it: through the block as it is now."""
    for j, (x, carry) in enumerate(inputs):
        inputs[j] = _run_block(model, block, x, carry)


def _run_block(model: nn.Module, block: int, x: torch.Tensor, carry) -> tuple:
    """One block from the start of the sequences (zero state, or a state-tuned model's own), as ``forward`` runs
    it: (x leaving it, carry)."""
    st = model.zero_state(x.shape[0])
    x, _, carry = model.run_block(block, x, (st.att_x[block], st.ffn_x[block], st.wkv[block]), False, carry)
    return x, carry


class _HeadReached(Exception):
    """Raised at the output norm: calibration has seen every linear it needs."""


def _stop_before_head(module, args):
    raise _HeadReached


# --- quantization ------------------------------------------------------------------------------

def hessian_error(w: torch.Tensor, q: torch.Tensor, H: torch.Tensor) -> float:
    """tr(D H D^T) / tr(W H W^T): relative expected output error of the layer on calibration inputs."""
    w, q, H = w.to(torch.float64), q.to(torch.float64), H.to(torch.float64)
    d = w - q
    return float(torch.einsum("oi,ij,oj->", d, H, d) / torch.einsum("oi,ij,oj->", w, H, w).clamp(min=1e-30))


def sqnr_db(w: torch.Tensor, q: torch.Tensor) -> float:
    noise = float(((w - q) ** 2).sum())
    return float("inf") if noise == 0 else 10 * np.log10(float((w**2).sum()) / noise)


def choose_methods(weights: dict[str, torch.Tensor], config: RWKVQuantBase) -> tuple[dict, dict, dict]:
    """Per matrix: ("sq"|"vq"), the reason, and the proxy values; plus the thresholds used."""
    if config.method in ("rtn", "gptq"):
        return {n: "sq" for n in weights}, {n: f"{config.method}: every matrix scalar" for n in weights}, {}
    if config.method == "gptvq":
        return {n: "vq" for n in weights}, {n: "gptvq: every matrix vector" for n in weights}, {}
    if config.proxy == "oracle":  # decided per matrix once both quantizers have run (_quantize_linears)
        return ({n: "oracle" for n in weights}, {n: "oracle: the lower Hessian-weighted error" for n in weights},
                {"proxy": "oracle"})
    if config.proxy == "max-rms":
        vals = {n: max_over_rms(w) for n, w in weights.items()}
        choice = {n: ("vq" if v > config.max_rms_threshold else "sq") for n, v in vals.items()}
        why = {n: f"max/rms={v:.2f} {'>' if choice[n] == 'vq' else '<='} {config.max_rms_threshold}" for n, v in vals.items()}
        return choice, why, {"proxy": "max-rms", "threshold": config.max_rms_threshold,
                             "values": {n: {"max_over_rms": v} for n, v in vals.items()}}
    pc = {n: coarse_proxy(w) for n, w in weights.items()}
    pf = {n: fine_proxy(w) for n, w in weights.items()}
    tau_c = thresholds(list(pc.values()), config.sq_percentile)
    tau_f = thresholds(list(pf.values()), config.sq_percentile)
    choice, why = {}, {}
    for n in weights:
        choice[n], why[n] = decide(pc[n], pf[n], tau_c, tau_f)
    return choice, why, {"proxy": "paper", "percentile": config.sq_percentile, "tau_c": tau_c, "tau_f": tau_f,
                         "values": {n: {"P_c": pc[n], "P_f": pf[n]} for n in weights}}


def _set_module(model: nn.Module, dotted: str, new: nn.Module) -> None:
    parent_name, _, attr = dotted.rpartition(".")
    setattr(model.get_submodule(parent_name), attr, new)


def quantize_matrix(name: str, w: torch.Tensor, H: torch.Tensor, choice: str, config: RWKVQuantBase,
                    cache: dict | None = None):
    """(quantized tensor, label) of one matrix: GPTVQ for "vq", else RTN (method rtn) or GPTQ.

    The one place every method quantizes a matrix, so RWKVQuant's SQ/VQ matrices are exactly the
    GPTQ/GPTVQ baselines' ones. ``cache`` (optional) keeps results across calls that share the model
    and calibration data; the key holds every setting the result depends on.
    """
    if choice == "vq":
        label = "gptvq" + (f" (normalised per {config.vq_scale_block} columns, {config.vq_scale_bits}-bit log scales)"
                           if config.vq_scale_block else "")
        key = (name, label, config.bits, config.vq_dim, config.vq_weights_per_codebook(), config.damp,
               config.vq_columns, config.kmeans_iters, config.codebook_update_steps, config.vq_scale_block,
               config.vq_scale_bits)
    else:
        label = config.sq_label()
        key = (name, label, config.bits, config.group_size, config.damp)
    if cache is not None and key in cache:
        return cache[key], label
    if choice == "vq":
        q = gptvq_quantize(w, H, config.bits, dim=config.vq_dim, group_size=config.vq_weights_per_codebook(),
                           columns=config.vq_columns, damp=config.damp, iters=config.kmeans_iters,
                           codebook_update_steps=config.codebook_update_steps, scale_block=config.vq_scale_block,
                           scale_bits=config.vq_scale_bits)
    elif config.method == "rtn":
        q = rtn_quantize(w, config.bits, config.group_size, config.symmetric)
    else:
        q = gptq_quantize(w, H, config.bits, config.group_size, damp=config.damp, act_order=config.act_order,
                          static_groups=config.static_groups, symmetric=config.symmetric)
    if cache is not None:
        cache[key] = q
    return q, label


def quantize_rwkv(model: nn.Module, calibration: np.ndarray, config: RWKVQuantBase, log=None, *,
                  cache: dict | None = None, inplace: bool = False):
    """A quantized copy of ``model`` (RWKV6/RWKV7) and the PassReport describing every decision.

    By default calibration is one pass of the fp model for every method alike, so a matrix's Hessian does
    not depend on the method and ``cache`` (a dict shared by calls on the same model and calibration data,
    e.g. a table's runs) can reuse per-matrix results. With ``config.sequential`` each block is calibrated
    on the quantized blocks before it and quantized (linears, then vectors) before the next is calibrated;
    its Hessians then depend on the method, so ``cache`` is not used. ``inplace=True`` quantizes ``model``
    itself (no copy: one fp32 model less in memory, for large checkpoints).
    """
    if not hasattr(model, "cfg") or getattr(model.cfg, "version", None) not in (6, 7):
        raise EdgesmithError(f"RWKV quantization got a {type(model).__name__}, not an RWKV-6/7 model.",
                             "load the model with models.rwkv.load_rwkv or an rwkv producer.")
    model = (model if inplace else copy.deepcopy(model)).eval()
    calib = np.asarray(calibration)[: config.n_calibration]
    # no copies: the quantizers never write into w, and each matrix (and its Hessian) is let go once replaced
    weights = {n: m.weight.detach() for n, m in linear_modules(model).items()}
    # the decision reads the weights only, so it is the same whichever way calibration goes
    choice, why, proxy_info = choose_methods(weights, config)
    state = _Tally()
    if config.sequential:
        # one block pass per block: the residual streams between blocks are kept (n_calibration x length x C
        # floats, twice for RWKV-7's carried values), not recomputed from the embedding for every block
        inputs = block_inputs(model, calib)
        for i in range(len(model.blocks)):
            H, importance = collect_calibration(model, calib, block=i, inputs=inputs)
            _quantize_linears(model, weights, [n for n in list(weights) if n.startswith(f"blocks.{i}.")], H,
                              choice, why, proxy_info, config, None, state, log)
            _quantize_vectors(model, [i], importance, config, state)
            if i + 1 < len(model.blocks):
                advance_inputs(model, i, inputs)
    else:
        H, importance = collect_calibration(model, calib)
        _quantize_linears(model, weights, list(weights), H, choice, why, proxy_info, config, cache, state, log)
        _quantize_vectors(model, range(len(model.blocks)), importance, config, state)
    vectors, n_bits, n_weights, vec_bits, vec_n = state.vectors, state.n_bits, state.n_weights, state.vec_bits, state.vec_n
    model.quant_vectors = vectors  # what qcheckpoint saves for the vectors
    model.quant_config = config.to_dict()
    n_vq = sum(1 for c in choice.values() if c == "vq")
    extra = {"method": config.method, "linear_bits_per_weight": n_bits / max(n_weights, 1),
             "linear_weights": n_weights, "n_sq": len(choice) - n_vq, "n_vq": n_vq,
             "vector_weights": vec_n, "vector_bits_per_weight": (vec_bits / vec_n) if vec_n else None,
             "decision": {k: v for k, v in proxy_info.items() if k != "values"},
             "calibration": "block-sequential" if config.sequential else "one fp pass",
             "calibration_sequences": int(len(calib)), "calibration_tokens": int(calib.size)}
    notes = ["kept in high precision: embedding, head, layer norms, LoRA matrices, decay/bonus parameters"
             + ("" if vectors else ", multiplication vectors")]
    report = PassReport(config.to_dict(), "torch", "torch", 0, 0, bits_per_weight=n_bits / max(n_weights, 1),
                        layers=state.layers, notes=notes, extra=extra)
    return model, report


@dataclass
class _Tally:
    """What quantizing the model's parts adds up: per-layer reports, bits and weights, the vector codebooks."""
    layers: list = field(default_factory=list)
    n_weights: int = 0
    n_bits: int = 0
    vec_bits: int = 0
    vec_n: int = 0
    vectors: dict = field(default_factory=dict)


def _quantize_linears(model, weights: dict, names: list[str], H: dict, choice: dict, why: dict, proxy_info: dict,
                      config: RWKVQuantBase, cache: dict | None, state: _Tally, log) -> None:
    """Replace the linears ``names`` by QuantLinear modules, adding their reports and bits to ``state``."""
    for name in names:
        w = weights.pop(name)
        if choice[name] == "oracle":
            choice[name], why[name], (q, label) = _oracle_choice(name, w, H[name], config, cache)
        else:
            q, label = quantize_matrix(name, w, H[name], choice[name], config, cache)
        deq = q.dequantize()
        _set_module(model, name, QuantLinear(q, w.shape[1], w.shape[0]))
        state.n_weights += q.n_weights
        state.n_bits += q.storage_bits()
        err = {"weight_sqnr_db": round(sqnr_db(w, deq), 3), "hessian_rel_error": hessian_error(w, deq, H.pop(name))}
        if proxy_info.get("values"):
            err.update({k: round(v, 4) for k, v in proxy_info["values"][name].items()})
        state.layers.append(LayerReport(name, f"quantized-{choice[name].upper()}", q.storage_bits() / q.n_weights,
                                           q.n_weights, err, f"{label}; {why[name]}"))
        if log:
            log(f"{name}: {label} {q.storage_bits() / q.n_weights:.3f} bpw, H-err {err['hessian_rel_error']:.4f}")


def _oracle_choice(name: str, w: torch.Tensor, H: torch.Tensor, config: RWKVQuantBase,
                   cache: dict | None) -> tuple[str, str, tuple]:
    """("sq"|"vq", why, (quantized, label)): of GPTQ's and GPTVQ's results on this matrix (both run), the one
    with the lower Hessian-weighted error on the calibration inputs."""
    done = {c: quantize_matrix(name, w, H, c, config, cache) for c in ("sq", "vq")}
    err = {c: hessian_error(w, q.dequantize(), H) for c, (q, _) in done.items()}
    pick = min(err, key=err.get)
    return pick, f"oracle: Hessian-weighted error GPTQ {err['sq']:.5f}, GPTVQ {err['vq']:.5f}", done[pick]


def _quantize_vectors(model, blocks, importance: dict, config: RWKVQuantBase, state: _Tally) -> None:
    """Codebook-quantize the multiplication vectors of ``blocks`` in place (every method, so the table compares
    like with like: weighted codebooks for RWKVQuant, plain k-means for the baselines)."""
    if not config.quantize_vectors:
        return
    weighted = config.method == "rwkvquant"
    for i in blocks:
        blk = model.blocks[i]
        for part, names in SHIFT_VECTORS[model.cfg.version].items():
            imp = importance[f"blocks.{i}.{part}"]
            for vname in names:
                p = getattr(getattr(blk, part), vname)
                full = f"blocks.{i}.{part}.{vname}"
                mine = optimise_codebook(p.detach(), imp if weighted else None, config.vector_bits)
                other = optimise_codebook(p.detach(), None if weighted else imp, config.vector_bits)
                deq = mine.dequantize()
                w_err = weighted_error(p.detach(), deq, imp)
                o_err = weighted_error(p.detach(), other.dequantize(), imp)
                err = ({"weighted_error": w_err, "unweighted_kmeans_weighted_error": o_err} if weighted
                       else {"weighted_error": w_err, "rwkvquant_codebook_weighted_error": o_err})
                with torch.no_grad():
                    p.copy_(deq)
                state.vectors[full] = mine
                state.vec_bits += mine.storage_bits()
                state.vec_n += mine.n_weights
                how = ("codebook weighted by clipped E[x^2] of the token shift (RWKVQuant)" if weighted
                       else "plain k-means codebook (the baselines' scheme for the vectors)")
                state.layers.append(LayerReport(full, "codebook", mine.storage_bits() / mine.n_weights,
                                                   mine.n_weights, err, f"{config.vector_bits}-bit {how}"))


@register_pass(RTNConfig)
@register_pass(GPTQConfig)
@register_pass(GPTVQConfig)
@register_pass(RWKVQuantConfig)
def _rwkv_quant_pass(artifact: Artifact, config: RWKVQuantBase, ctx: PassContext) -> PassResult:
    calib = ctx.calibration_checked("calibration token windows (training split)")
    qmodel, report = quantize_rwkv(artifact.module, calib, config)
    from edgesmith.compress.rwkvquant.qcheckpoint import quantized_size_bytes

    from edgesmith.compress.rwkvquant.qcheckpoint import save_quantized

    report.size_before_bytes = artifact.size_bytes()
    report.size_after_bytes = quantized_size_bytes(qmodel)
    # the quantized checkpoint too, so a deploy can be rerun from it (edgesmith deploy model.quantized.pth)
    saved = save_quantized(qmodel, ctx.workdir / "model.quantized.pth", force=True)
    report.notes.append(f"quantized checkpoint written beside the artifacts: {saved.name} (deployable as it is)")
    new = Artifact("torch", module=qmodel, meta={**artifact.meta, "quantization": config.to_dict(),
                                                 "checkpoint": str(saved)})
    return PassResult(new, report)
