"""``export-rwkv-c``: an RWKV-6 or RWKV-7 language model as the arrays of the C decoder (``runtimes/rwkv_c_rt.py``).

The decoder runs one token at a time, batch 1, in C: every block linear is read once per token, so its speed
is bound by the bytes it streams. The file (``.rwkvc.npz``) holds each array under the name the decoder's
structs use, plus the model's sizes as JSON (``config``):

- block linears already 4-bit or less (RTN, GPTQ, RWKVQuant's SQ layers: ``QuantLinear`` over an
  ``SQTensor`` whose group is 32 or a multiple of 64) keep their codes, scales and zero points exactly, stored as
  4-bit codes (3-bit codes fit unchanged), so the decoder computes with the very weights the quantizer chose;
- fp32 block linears stay fp32 (``weights="as-is"``) or are rounded to 4 bits here (``weights="int4"``: RTN,
  asymmetric, ``group`` inputs per scale, the grid ``compress.rwkvquant.rtn`` uses);
- codebook/VQ layers (RWKVQuant's and GPTVQ's) and SQ layers of 5-8 bits keep their weights exactly as 8-bit
  codes with a scale and an offset per row and group (every VQ weight is an 8-bit codebook code times its
  codebook's scale plus its offset), for the decoder's 8-bit kernel;
- anything else (wider codes, other groups, codebooks that do not split into blocks of 32 or 64) is written as its
  dequantized fp32 weight, and the report says which layers and why;
- embedding, LoRAs, vectors, norms and head stay fp32 (as in the step graphs of ``export-step-onnx``).

Within each 64 inputs of a 4-bit row, byte j holds code j (low nibble) and code j + 32 (high nibble): the
order the decoder's AVX2 kernel unpacks with one load and two masks. Rows go in quads, interleaved per 64
inputs (codes) and per group (scales, zero points), so the kernel streams each quad sequentially.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from edgesmith.common import EdgesmithError, atomic_files
from edgesmith.compress.base import INIT_SUFFIX, Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult, register_pass

SUFFIX = ".rwkvc.npz"
WEIGHT_MODES = ("as-is", "int4")
KERNEL_CHUNK = 64  # inputs per 32-byte load of the decoder's 4-bit kernel
QUAD = 4  # rows the kernel computes together, their codes interleaved
HALF_GROUP = KERNEL_CHUNK // 2  # the one group below a chunk: the chunk's low and high halves (nibbles or loads)
NEEDED_FLAGS = ("avx2", "fma")  # what the decoder is compiled for (runtimes/rwkv_step.c)
BLOCK_LINEARS = {7: (("att", "receptance", "r"), ("att", "key", "k"), ("att", "value", "v"), ("att", "output", "o"),
                     ("ffn", "key", "fk"), ("ffn", "value", "fv")),
                 6: (("att", "receptance", "r"), ("att", "key", "k"), ("att", "value", "v"), ("att", "output", "o"),
                     ("att", "gate", "g"), ("ffn", "key", "fk"), ("ffn", "receptance", "fr"), ("ffn", "value", "fv"))}
LORAS = {7: {"w1": "w1", "w2": "w2", "a1": "a1", "a2": "a2", "v1": "v1", "v2": "v2", "g1": "g1", "g2": "g2"},
         6: {"maa1": "time_maa_w1", "dec1": "time_decay_w1", "dec2": "time_decay_w2"}}  # file name: parameter
VECTORS = {7: {"att": {n: n for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "v0", "k_k", "k_a",
                                      "r_k")},
               "ffn": {"ffn_x_k": "x_k"}},
           6: {"att": {"maa_x": "time_maa_x", "maa_w": "time_maa_w", "maa_k": "time_maa_k", "maa_v": "time_maa_v",
                       "maa_r": "time_maa_r", "maa_g": "time_maa_g", "time_decay": "time_decay",
                       "faaaa": "time_faaaa"},
               "ffn": {"ffn_maa_k": "time_maa_k", "ffn_maa_r": "time_maa_r"}}}


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def why_unavailable() -> str:
    """Why the C decoder cannot run here ("" when it can): it is compiled by gcc for AVX2 and FMA."""
    if shutil.which("gcc") is None:
        return "gcc is not on PATH. Fix: install gcc (apt-get install gcc)."
    missing = [f for f in NEEDED_FLAGS if f not in cpu_flags()]
    if missing:
        return (f"this CPU lacks {', '.join(missing)} (the C decoder's kernels need AVX2 and FMA). Fix: decode with "
                "export-step-onnx and onnxruntime instead.")
    return ""


@dataclass
class ExportRWKVCConfig(PassConfig):
    """``weights``: "as-is" keeps each block linear as the model has it (4-bit codes where it is quantized,
    fp32 where not); "int4" also rounds the fp32 ones to 4 bits (RTN, asymmetric, ``group`` inputs per scale)."""

    kind: ClassVar[str] = "export-rwkv-c"
    contract_fixture: ClassVar[str] = "rwkv-torch"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "rwkv-c"

    weights: str = "as-is"
    group: int = 64

    def validate(self) -> None:
        if self.weights not in WEIGHT_MODES:
            self._fail("weights", f"is {self.weights!r}", f"use one of {', '.join(WEIGHT_MODES)}.")
        if isinstance(self.group, bool) or not isinstance(self.group, int) or not kernel_group(self.group):
            self._fail("group", f"is {self.group!r}", f"use {HALF_GROUP} or a multiple of {KERNEL_CHUNK} (64, 128, ...).")


def kernel_group(group: int) -> bool:
    """Whether the decoder's integer kernels take ``group`` inputs per scale: 32, or a multiple of 64."""
    return group == HALF_GROUP or (group > 0 and group % KERNEL_CHUNK == 0)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """(rows, cols) codes < 16, rows a multiple of 4 and cols of 64 -> (rows / 4, cols / 64, 4, 32) bytes: per
    64 inputs of a row, byte j = code j | code j + 32 << 4, and the four rows of a quad interleaved per 64 inputs
    (the decoder reads a quad as one sequential stream)."""
    rows, cols = codes.shape
    c = codes.astype(np.uint8).reshape(rows // QUAD, QUAD, cols // KERNEL_CHUNK, 2, KERNEL_CHUNK // 2)
    return np.ascontiguousarray((c[:, :, :, 0] | (c[:, :, :, 1] << 4)).transpose(0, 2, 1, 3))


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """The inverse of ``pack_nibbles``: (rows, cols) codes."""
    quads, chunks = packed.shape[:2]
    p = packed.transpose(0, 2, 1, 3)[:, :, :, None]  # (quads, 4, chunks, 1, 32)
    return np.concatenate([p & 0x0F, p >> 4], axis=3).reshape(quads * QUAD, chunks * KERNEL_CHUNK)


def by_quad(a: np.ndarray) -> np.ndarray:
    """(rows, groups) per-row values -> (rows / 4, groups, 4): a quad's four rows side by side per group."""
    rows, groups = a.shape
    return np.ascontiguousarray(a.reshape(rows // QUAD, QUAD, groups).transpose(0, 2, 1))


def from_quad(a: np.ndarray) -> np.ndarray:
    """The inverse of ``by_quad``."""
    quads, groups, _ = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1).reshape(quads * QUAD, groups))


def pack_bytes(codes: np.ndarray) -> np.ndarray:
    """(rows, cols) signed 8-bit codes, rows a multiple of 4 and cols of 64 -> (rows / 4, cols / 64, 4, 64): the
    four rows of a quad interleaved per 64 inputs, as ``pack_nibbles`` does for 4-bit codes."""
    rows, cols = codes.shape
    c = codes.astype(np.int8).reshape(rows // QUAD, QUAD, cols // KERNEL_CHUNK, KERNEL_CHUNK)
    return np.ascontiguousarray(c.transpose(0, 2, 1, 3))


def unpack_bytes(packed: np.ndarray) -> np.ndarray:
    """The inverse of ``pack_bytes``."""
    quads, chunks = packed.shape[:2]
    return packed.transpose(0, 2, 1, 3).reshape(quads * QUAD, chunks * KERNEL_CHUNK)


def _kernel_form(q, rows: int, cols: int) -> tuple[int, int, str]:
    """Which of the decoder's integer kernels takes a quantized layer exactly (4 or 8 bits; 0: none), with
    which group of inputs per scale, and, when none does, why."""
    from edgesmith.compress.rwkvquant.export import vq_block

    kind = getattr(q, "kind", None)
    if rows % QUAD:
        return 0, 0, f"{rows} rows (the kernels take multiples of {QUAD})"
    if kind == "vq":
        bs = vq_block(q, (KERNEL_CHUNK, 128, 256, HALF_GROUP)) if cols % KERNEL_CHUNK == 0 else None
        return (8, bs, "") if bs else (0, 0, f"codebooks of {q.group_cols} columns over {cols} inputs (the 8-bit "
                                              f"kernel needs blocks of {HALF_GROUP}, {KERNEL_CHUNK}, 128 or 256 inside "
                                              f"one codebook, and inputs in chunks of {KERNEL_CHUNK})")
    if kind != "sq":
        return 0, 0, f"a {kind or type(q).__name__} layer"
    if q.bits > 8:
        return 0, 0, f"{q.bits}-bit codes"
    if not kernel_group(q.group_size) or cols % KERNEL_CHUNK or cols % q.group_size:
        return 0, 0, (f"group {q.group_size} over {cols} inputs (the kernels take groups of {HALF_GROUP} or multiples "
                      f"of {KERNEL_CHUNK}, and inputs in chunks of {KERNEL_CHUNK})")
    return (4 if q.bits <= 4 else 8), q.group_size, ""


def int8_arrays(q, name: str, rows: int, cols: int, group: int) -> dict:
    """An SQ layer of 5-8 bits or a VQ layer (in blocks of ``group`` inputs) as the 8-bit kernel's arrays
    (signed codes, per row and group a scale and an offset: w = s q + o, exactly the layer's dequantized
    weight)."""
    from edgesmith.compress.rwkvquant.export import vq_int8

    if q.kind == "vq":
        codes, scales, offsets = vq_int8(q, group)
    else:
        codes = q.codes.numpy()
        scales = q.scales.float().numpy().reshape(rows, cols // group)
        offsets = -scales * q.zeros.numpy().astype(np.float32).reshape(rows, cols // group)
    centred = (codes.astype(np.int16) - 128).astype(np.int8)  # signed for the kernel: w = s (q' + 128) + o
    return {f"{name}.q8": pack_bytes(centred), f"{name}.s": by_quad(scales.astype(np.float32)),
            f"{name}.o": by_quad((offsets + 128.0 * scales).astype(np.float32))}


def linear_arrays(module, name: str, config: ExportRWKVCConfig) -> tuple[dict, LayerReport]:
    """The decoder's arrays of one block linear, and what became of it."""
    from edgesmith.compress.rwkvquant.rtn import rtn_quantize

    q = getattr(module, "q", None)
    w = module.weight.detach().float()
    rows, cols = w.shape
    form = 0
    if q is None and config.weights == "int4" and cols % config.group == 0 and cols % KERNEL_CHUNK == 0 and \
            rows % QUAD == 0:
        q, form, how = rtn_quantize(w, 4, config.group), 4, f"rounded to 4 bits here (RTN, group {config.group})"
    elif q is not None:
        form, group, why = _kernel_form(q, rows, cols)
        how = (f"dequantized to fp32: {why}" if not form else
               f"{q.bits}-bit codes kept exactly" if q.kind == "sq" and form == 4 else
               f"{q.bits}-bit codes kept exactly, as 8-bit" if q.kind == "sq" else
               "codebook codes kept exactly, as 8-bit codes with a scale and an offset per group")
    else:
        how = "fp32" if config.weights == "as-is" else (f"fp32: {rows} x {cols} does not split into quads of rows "
                                                        f"and groups of {config.group} inputs in chunks of "
                                                        f"{KERNEL_CHUNK}")
    if not form:
        action = "dequantized" if how.startswith("dequantized") else "kept fp32"
        return {f"{name}.w": np.ascontiguousarray(w.numpy())}, LayerReport(name, action, 32.0, rows * cols, reason=how)
    if form == 8:
        return int8_arrays(q, name, rows, cols, group), LayerReport(name, "quantized", 8 + 64 / group, rows * cols, reason=how)
    ng = cols // q.group_size
    arrays = {f"{name}.q": pack_nibbles(q.codes.numpy()),
              f"{name}.s": by_quad(q.scales.float().numpy().reshape(rows, ng)),
              f"{name}.z": by_quad(q.zeros.numpy().astype(np.uint8).reshape(rows, ng))}
    bits = 4 + (32 + 8) / q.group_size
    return arrays, LayerReport(name, "quantized", bits, rows * cols, reason=how)


def model_arrays(model, config: ExportRWKVCConfig) -> tuple[dict, dict, list[LayerReport]]:
    """Every array of the decoder's file, its sizes, and one report line per block linear."""
    cfg = model.cfg
    ver = cfg.version
    if cfg.head_size > 256:
        raise EdgesmithError(f"export-rwkv-c takes heads of at most 256 channels; this model's are {cfg.head_size}.",
                             "export it with export-step-onnx instead.")
    f32 = lambda t: np.ascontiguousarray(t.detach().float().numpy().reshape(-1))  # noqa: E731
    arrays = {"emb": np.ascontiguousarray(model.emb.weight.detach().float().numpy()),
              "ln0_w": f32(model.blocks[0].ln0.weight), "ln0_b": f32(model.blocks[0].ln0.bias),
              "lnout_w": f32(model.ln_out.weight), "lnout_b": f32(model.ln_out.bias),
              "head.w": np.ascontiguousarray(model.head.weight.detach().float().numpy())}
    reports = []
    for i, blk in enumerate(model.blocks):
        p = f"L{i}."
        for ln in ("ln1", "ln2"):
            arrays[p + ln + "_w"], arrays[p + ln + "_b"] = f32(getattr(blk, ln).weight), f32(getattr(blk, ln).bias)
        arrays[p + "lnx_w"], arrays[p + "lnx_b"] = f32(blk.att.ln_x.weight), f32(blk.att.ln_x.bias)
        for part, names in VECTORS[ver].items():
            for short, attr in names.items():
                arrays[p + short] = f32(getattr(getattr(blk, part), attr))
        for short, attr in LORAS[ver].items():  # x @ A: the decoder computes A^T x, so A is stored (out, in)
            arrays[p + short + ".w"] = np.ascontiguousarray(getattr(blk.att, attr).detach().float().numpy().T)
        if ver == 6:  # the five mixes' second halves: (5, D, C) -> five (C, D)
            for i, a in enumerate(blk.att.time_maa_w2.detach().float().numpy()):
                arrays[f"{p}maa2_{i}.w"] = np.ascontiguousarray(a.T)
        for part, attr, short in BLOCK_LINEARS[ver]:
            a, rep = linear_arrays(getattr(getattr(blk, part), attr), p + short, config)
            arrays.update(a)
            reports.append(rep)
    widest = (max(5 * cfg.d_mix_lora, cfg.d_decay_lora) if ver == 6 else
              max(cfg.d_decay_lora, cfg.d_aaa_lora, cfg.d_mv_lora, cfg.d_gate_lora))
    sizes = {"n_layer": cfg.n_layer, "C": cfg.n_embd, "H": cfg.n_head, "N": cfg.head_size, "V": cfg.vocab_size,
             "F": cfg.dim_ffn, "D": widest, "version": ver}
    if getattr(model, "init_wkv", None) is not None:
        arrays["init_wkv"] = np.ascontiguousarray(model.init_wkv.detach().float().numpy())
    return arrays, sizes, reports


def bytes_per_token(arrays: dict, sizes: dict) -> int:
    """Bytes one decoding step reads: every array once, the embedding as one row, the state read and written."""
    weights = sum(a.nbytes for k, a in arrays.items() if k not in ("emb", "init_wkv"))
    row = arrays["emb"].nbytes // sizes["V"]
    L, C, H, N = sizes["n_layer"], sizes["C"], sizes["H"], sizes["N"]
    state = 4 * L * (2 * C + H * N * N)
    return int(weights + row + 2 * state)


def recurrent_spec(sizes: dict, initial_state: bool) -> dict:
    """The decoder's step interface in ``runtimes.stateful`` terms: a token in, logits out, three state arrays
    (per sequence: token-shift inputs of both mixes, every layer's wkv matrices) fed back."""
    L, C, H, N = sizes["n_layer"], sizes["C"], sizes["H"], sizes["N"]
    shapes = {"att_x": [L, C], "ffn_x": [L, C], "wkv": [L, H, N, N]}
    spec = {"input": "token", "output": "logits", "state": [[k, f"{k}_out"] for k in shapes],
            "state_shapes": shapes, "state_dtypes": {k: "float32" for k in shapes}}
    if initial_state:
        spec["initial_state"] = True
    return spec


def macs_per_token(arrays: dict) -> int:
    """Multiply-accumulates of one step: every matrix (block linears, LoRAs, head) once."""
    total = 0
    for k, a in arrays.items():
        if k.endswith(".w"):
            total += a.size
        elif k.endswith(".q"):
            total += a.size * 2
        elif k.endswith(".q8"):
            total += a.size
    return int(total)


@register_pass(ExportRWKVCConfig)
def _export_rwkv_c(artifact: Artifact, config: ExportRWKVCConfig, ctx: PassContext) -> PassResult:
    model = artifact.module
    if not hasattr(model, "cfg") or not hasattr(model, "blocks") or getattr(getattr(model, "cfg", None),
                                                                             "version", None) not in (6, 7):
        raise EdgesmithError(f"export-rwkv-c takes an RWKV language model, not a {type(model).__name__}.",
                             "use export-onnx or export-step-onnx for other models.")
    arrays, sizes, layers = model_arrays(model, config)
    out = ctx.workdir / f"model{SUFFIX}"
    # a state-tuned model's starting state goes beside it, where runtimes.stateful looks for it; both or neither
    finals = [out] + ([Path(str(out) + INIT_SUFFIX)] if "init_wkv" in arrays else [])
    with atomic_files(finals, force=True) as tmps:
        with open(tmps[0], "wb") as fh:
            np.savez(fh, config=np.array(json.dumps(sizes)), **arrays)
        if len(tmps) > 1:
            L, C = sizes["n_layer"], sizes["C"]
            with open(tmps[1], "wb") as fh:
                np.savez(fh, att_x=np.zeros((L, C), np.float32), ffn_x=np.zeros((L, C), np.float32),
                         wkv=arrays["init_wkv"])
    per_token = bytes_per_token(arrays, sizes)
    n4, n8 = (sum(k.endswith(suffix) for k in arrays) for suffix in (".q", ".q8"))  # one codes array per layer
    meta = {**{k: v for k, v in artifact.meta.items() if k != "recurrent"}, "rwkv_c": sizes,
            "bytes_per_token": per_token, "macs_per_token": macs_per_token(arrays),
            "precision": "int4" if n4 else "int8" if n8 else "fp32", "recurrent": recurrent_spec(sizes, "init_wkv" in arrays)}
    # the per-sample operation counts a cost model reads (hardware.Workload's fields): one token per call
    meta["workload"] = {"macs": float(meta["macs_per_token"]), "weight_bytes": float(per_token),
                        "precision": meta["precision"], "n_layers": int(sizes["n_layer"]),
                        "source": "export-rwkv-c: every matrix's rows x cols MACs and the bytes the decoder reads per "
                                  "token (4-bit codes, scales and zero points, fp32 layers, one embedding row, state)"}
    new = Artifact("rwkv-c", path=out, meta=meta)
    lin_bits = sum(r.bits_per_weight * r.n_params for r in layers) / sum(r.n_params for r in layers)
    notes = [f"{n4} of {len(layers)} block linears as 4-bit codes, {n8} as 8-bit codes, the rest fp32; "
             f"{per_token / 2**20:.1f} MiB read per decoded token"]
    notes += [f"{r.name}: {r.reason}" for r in layers if r.action == "dequantized"]
    report = PassReport(config.to_dict(), "torch", "rwkv-c", artifact.size_bytes(), new.size_bytes(),
                        bits_per_weight=lin_bits, layers=layers, notes=notes, extra={"bytes_per_token": per_token})
    return PassResult(new, report)
