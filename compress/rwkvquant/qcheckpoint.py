"""Save and reload quantized RWKV models exactly: codes bit-packed, scales, zero points, codebooks
and the per-layer decisions stored with the weights.

File layout (a torch ``.pth`` dict, loaded with ``weights_only=True``)::

    format: "edgesmith-rwkv-quant/1"
    config: RWKVConfig dict;  quant_config: the pass config dict
    fp: {official key: tensor}   every tensor not quantized (fp16 where that is exact, else fp32)
    linears: {name: {kind: "sq"|"vq", ...packed codes and their grids/codebooks}}
    vectors: {official key: {...packed indices + 8-bit codebook}}

Indices and codes are packed to their exact bit width, so the file size tracks the bit count.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgesmith.compress.rwkvquant.tensors import QuantLinear, SQTensor, VecCodebook, VQTensor, pack_bits, unpack_bits
from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model

FORMAT = "edgesmith-rwkv-quant/1"


def _packed(t: torch.Tensor, bits: int) -> torch.Tensor:
    return torch.from_numpy(pack_bits(t.cpu().numpy(), bits))


def _unpacked(t: torch.Tensor, bits: int, shape) -> torch.Tensor:
    n = int(np.prod(shape))
    return torch.from_numpy(unpack_bits(t.numpy(), bits, n).reshape(shape))


def _encode_q(q) -> dict:
    if isinstance(q, SQTensor):
        return {"kind": "sq", "bits": q.bits, "group_size": q.group_size, "shape": list(q.codes.shape),
                "zshape": list(q.zeros.shape), "codes": _packed(q.codes, q.bits), "scales": q.scales.clone(),
                "zeros": _packed(q.zeros, q.bits)}
    if isinstance(q, VQTensor):
        d = {"kind": "vq", "bits": q.bits, "dim": q.dim, "group_cols": q.group_cols, "group_rows": q.group_rows,
             "shape": list(q.indices.shape), "indices": _packed(q.indices, q.bits * q.dim),
             "cb_shape": list(q.codebook_codes.shape), "cb_codes": q.codebook_codes.clone(),
             "cb_scale": q.codebook_scale.clone(), "cb_offset": q.codebook_offset.clone()}
        if q.scale_codes is not None:  # blockwise normalisation
            d.update(s_bits=q.scale_bits, s_block=q.scale_block, s_shape=list(q.scale_codes.shape),
                     s_codes=_packed(q.scale_codes, q.scale_bits), s_lo=q.scale_lo.clone(), s_step=q.scale_step.clone())
        return d
    raise TypeError(type(q))


def _decode_q(d: dict):
    if d["kind"] == "sq":
        return SQTensor(_unpacked(d["codes"], d["bits"], d["shape"]).to(torch.uint8), d["scales"],
                        _unpacked(d["zeros"], d["bits"], d["zshape"]).to(torch.uint8), d["bits"], d["group_size"])
    if d["kind"] == "vq":
        scaled = {}
        if "s_codes" in d:
            scaled = dict(scale_codes=_unpacked(d["s_codes"], d["s_bits"], d["s_shape"]).to(torch.uint8),
                          scale_lo=d["s_lo"], scale_step=d["s_step"], scale_bits=d["s_bits"], scale_block=d["s_block"])
        return VQTensor(_unpacked(d["indices"], d["bits"] * d["dim"], d["shape"]), d["cb_codes"], d["cb_scale"],
                        d["cb_offset"], d["bits"], d["dim"], d["group_cols"], d.get("group_rows"), **scaled)
    raise EdgesmithError(f"quantized layer kind {d['kind']!r} is unknown.", "re-create the file with this version.")


def _compact(t: torch.Tensor) -> torch.Tensor:
    h = t.detach().to(torch.float16)
    return h if torch.equal(h.to(torch.float32), t.detach().to(torch.float32)) else t.detach().to(torch.float32)


def quantized_payload(model: nn.Module) -> dict:
    linears = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    vectors: dict[str, VecCodebook] = getattr(model, "quant_vectors", {})
    fp = {k: _compact(v) for k, v in model.state_dict().items() if k not in vectors}
    return {"format": FORMAT, "config": model.cfg.to_dict(), "quant_config": getattr(model, "quant_config", {}),
            "fp": fp, "linears": {n: _encode_q(m.q) for n, m in linears.items()},
            "vectors": {n: {"bits": cb.bits, "shape": list(cb.shape), "n": cb.indices.numel(),
                            "indices": _packed(cb.indices, cb.bits), "cb_codes": cb.codebook_codes.clone(),
                            "cb_scale": cb.codebook_scale.clone(), "cb_offset": cb.codebook_offset.clone()}
                        for n, cb in vectors.items()},
            "init_wkv": None if getattr(model, "init_wkv", None) is None else model.init_wkv.clone()}


def quantized_size_bytes(model: nn.Module) -> int:
    """Bytes of the saved file (serialised in memory)."""
    buf = io.BytesIO()
    torch.save(quantized_payload(model), buf)
    return buf.getbuffer().nbytes


def save_quantized(model: nn.Module, path: str | os.PathLike, *, force: bool = False) -> Path:
    if not any(isinstance(m, QuantLinear) for m in model.modules()):
        raise EdgesmithError("save_quantized got a model without quantized layers.",
                             "quantize it first (compress.rwkvquant.quantize_rwkv) or save it with save_rwkv.")
    path = Path(path)
    with atomic_path(path, force=force) as tmp:
        torch.save(quantized_payload(model), tmp)
    return path


def dequantized_model(model: nn.Module) -> nn.Module:
    """A plain RWKV6/RWKV7 (official parameter names) whose weights are the quantized model's dequantized ones:
    what ``save_rwkv`` writes for runtimes that read official checkpoints (the ``rwkv`` package, say)."""
    plain = build_model(model.cfg)
    state = dict(model.state_dict())
    for name, mod in model.named_modules():
        if isinstance(mod, QuantLinear):
            state[f"{name}.weight"] = mod.weight.detach().to(torch.float32)
    plain.load_state_dict(state, strict=True)
    if getattr(model, "init_wkv", None) is not None:
        plain.init_wkv = model.init_wkv
    return plain.eval()


def load_quantized(path: str | os.PathLike) -> nn.Module:
    """Rebuild the quantized model exactly as it was saved (same dequantized weights, same logits)."""
    path = Path(path)
    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for corrupt or truncated archives
        raise EdgesmithError(f"quantized checkpoint {path} cannot be read ({type(e).__name__}).",
                             "the file is truncated or not an edgesmith quantized RWKV file; re-create it.") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise EdgesmithError(f"{path} is not an edgesmith quantized RWKV checkpoint (format {FORMAT}).",
                             "load plain official checkpoints with models.rwkv.load_rwkv instead.")
    missing = [k for k in ("config", "linears", "vectors", "fp") if k not in d]
    if missing:  # the marker without the contents: a damaged or hand-made file
        raise EdgesmithError(f"{path} is marked as an edgesmith quantized RWKV checkpoint but has no "
                             f"{', '.join(missing)}.", "re-create the quantized checkpoint; this one is incomplete.")
    model = build_model(RWKVConfig.from_dict(d["config"]))
    for name, qd in d["linears"].items():
        q = _decode_q(qd)
        parent, _, attr = name.rpartition(".")
        out_f, in_f = q.dequantize().shape
        setattr(model.get_submodule(parent), attr, QuantLinear(q, in_f, out_f))
    vectors = {}
    for name, vd in d["vectors"].items():
        vectors[name] = VecCodebook(_unpacked(vd["indices"], vd["bits"], [vd["n"]]).to(torch.uint8), vd["cb_codes"],
                                    vd["cb_scale"], vd["cb_offset"], vd["bits"], tuple(vd["shape"]))
    state = {k: v.to(torch.float32) for k, v in d["fp"].items()}
    state.update({k: cb.dequantize() for k, cb in vectors.items()})
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        first = (missing or unexpected)[0]
        raise EdgesmithError(f"{path}: tensor '{first}' is {'missing' if missing else 'unexpected'}.",
                             "re-create the quantized checkpoint; this one is incomplete or from another model.")
    model.quant_vectors = vectors
    model.quant_config = d.get("quant_config", {})
    if d.get("init_wkv") is not None:  # a state-tuned model's trained starting state
        model.init_wkv = d["init_wkv"].to(torch.float32)
    return model.eval()
