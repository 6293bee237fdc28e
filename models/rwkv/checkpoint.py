"""Load and save RWKV checkpoints in the official ``.pth`` layout (a flat dict of tensors).

The key names are those of BlinkDL's training code (``emb.weight``, ``blocks.{i}.att.time_maa_x``,
``blocks.{i}.att.r_k``, ``head.weight`` ...), which are exactly the parameter names of
``RWKV6``/``RWKV7`` here, so a user's checkpoint loads unchanged. The version and every size are
read from the tensors themselves; anything missing, extra, misshapen or non-finite is rejected with
the offending key named. Per-channel vectors may come as (1, 1, C) (training checkpoints) or
flattened (C,) (some converters); both load.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from torch import nn

from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.rwkv6 import RWKV6
from edgesmith.models.rwkv.rwkv7 import RWKV7

StateDict = dict[str, torch.Tensor]


def model_class(version: int) -> type[nn.Module]:
    return {6: RWKV6, 7: RWKV7}[version]


def build_model(cfg: RWKVConfig) -> nn.Module:
    return model_class(cfg.version)(cfg)


def expected_shapes(cfg: RWKVConfig) -> dict[str, tuple[int, ...]]:
    """Official key -> shape for a model of ``cfg`` (built on the meta device: no memory, no time)."""
    with torch.device("meta"):
        m = build_model(cfg)
    return {k: tuple(v.shape) for k, v in m.state_dict().items()}


def detect_version(sd: StateDict, source: str = "checkpoint") -> int:
    if "blocks.0.att.time_maa_x" in sd:
        return 6
    if "blocks.0.att.x_r" in sd:
        return 7
    raise EdgesmithError(f"{source} is not an RWKV-6 or RWKV-7 checkpoint: it has neither "
                         "'blocks.0.att.time_maa_x' (v6) nor 'blocks.0.att.x_r' (v7).",
                         "pass an official RWKV-6/7 .pth file (RWKV-4/5 are not supported).")


def _need(sd: StateDict, key: str, source: str, ndim: int | None = None) -> torch.Tensor:
    if key not in sd:
        raise EdgesmithError(f"{source} lacks the key '{key}'.",
                             "use a complete official RWKV checkpoint (the file may be truncated or from another model).")
    t = sd[key]
    if not isinstance(t, torch.Tensor):
        raise EdgesmithError(f"{source}: '{key}' is a {type(t).__name__}, not a tensor.", "re-save the checkpoint.")
    if ndim is not None and t.ndim != ndim:
        raise EdgesmithError(f"{source}: '{key}' has shape {tuple(t.shape)}, expected {ndim} dimensions.",
                             "use an official RWKV checkpoint of the detected version.")
    return t


def infer_config(sd: StateDict, source: str = "checkpoint") -> RWKVConfig:
    """Read the version and sizes from the tensors' shapes."""
    version = detect_version(sd, source)
    vocab, C = _need(sd, "emb.weight", source, 2).shape
    n_layer = 0
    while f"blocks.{n_layer}.ln1.weight" in sd:
        n_layer += 1
    if n_layer == 0:
        _need(sd, "blocks.0.ln1.weight", source)
    faaaa_key = "blocks.0.att.time_faaaa" if version == 6 else "blocks.0.att.r_k"
    hn = _need(sd, faaaa_key, source).reshape(-1, _need(sd, faaaa_key, source).shape[-1]).shape
    kw = dict(version=version, n_layer=n_layer, n_embd=int(C), head_size=int(hn[1]), vocab_size=int(vocab),
              dim_ffn=int(_need(sd, "blocks.0.ffn.key.weight", source, 2).shape[0]))
    a = "blocks.0.att."
    if version == 6:
        kw["d_mix_lora"] = int(_need(sd, a + "time_maa_w2", source, 3).shape[1])
        kw["d_decay_lora"] = int(_need(sd, a + "time_decay_w1", source, 2).shape[1])
    else:
        for field, key in (("d_decay_lora", "w1"), ("d_aaa_lora", "a1"), ("d_mv_lora", "v1"), ("d_gate_lora", "g1")):
            kw[field] = int(_need(sd, a + key, source, 2).shape[1])
    try:
        return RWKVConfig(**kw)
    except EdgesmithError as e:
        raise EdgesmithError(f"{source} has inconsistent sizes: {e.problem}", e.fix) from None


def check_state_dict(sd: StateDict, cfg: RWKVConfig, source: str = "checkpoint") -> StateDict:
    """Every expected key present with the right shape (reshaping flattened vectors), nothing extra, all finite."""
    shapes = expected_shapes(cfg)
    extra = sorted(set(sd) - set(shapes))
    if extra:
        raise EdgesmithError(f"{source} has {len(extra)} unexpected key(s), first '{extra[0]}'.",
                             f"pass a plain RWKV-{cfg.version} checkpoint (no optimizer state or other models).")
    out = {}
    for key, shape in shapes.items():
        t = _need(sd, key, source)
        if tuple(t.shape) != shape:
            if t.numel() == torch.Size(shape).numel() and (t.ndim == 1 or t.squeeze().ndim <= 1):
                t = t.reshape(shape)
            else:
                raise EdgesmithError(f"{source}: '{key}' has shape {tuple(t.shape)} but this model needs {shape}.",
                                     "check that every layer of the checkpoint has the same sizes.")
        t = t.detach().to(torch.float32)
        if not torch.isfinite(t).all():
            raise EdgesmithError(f"{source}: '{key}' contains NaN or infinite values.",
                                 "use an intact checkpoint (this one is corrupt or diverged in training).")
        out[key] = t
    return out


def read_state_dict(path: str | os.PathLike, trust: bool = False) -> StateDict:
    """The tensors of a ``.pth``, read by torch's weights-only unpickler; a file that holds other Python objects is
    refused (unpickling them could run code) unless ``trust`` (``--trust-model-file``)."""
    import pickle

    path = Path(path)
    if not path.is_file():
        raise EdgesmithError(f"checkpoint {path} does not exist.", "check the path.")
    try:
        sd = torch.load(path, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as e:
        # torch's own advice (drop weights_only) is not ours to give: say what the weights-only loader met
        reason = re.search(r"WeightsUnpickler error:\s*(.+?)\s*(?:Check the documentation|$)", str(e), re.S)
        reason = " ".join(reason.group(1).split())[:200] if reason else type(e).__name__
        if reason.startswith("Unsupported global"):
            raise EdgesmithError(f"checkpoint {path} holds Python objects besides tensors ({reason}): loading them "
                                 "would run code stored in the file.",
                                 "save a state dict of tensors, or pass --trust-model-file if you trust where the "
                                 "file came from.") from None
        raise EdgesmithError(f"checkpoint {path} cannot be read by the weights-only loader ({reason}).",
                             "the file is truncated or not a torch .pth; copy it again (or pass --trust-model-file "
                             "for a pickle you trust).") from None
    except Exception as e:  # EOFError, BadZipFile, RuntimeError...: not a readable .pth
        raise _unreadable(path, e) from None
    if not isinstance(sd, dict) or not all(isinstance(k, str) for k in sd):
        raise EdgesmithError(f"checkpoint {path} holds a {type(sd).__name__}, not a dict of named tensors.",
                             "save the model's state_dict() (official layout), not the module or a list.")
    return sd


def _unreadable(path: Path, e: Exception) -> EdgesmithError:
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    return EdgesmithError(f"checkpoint {path} cannot be read ({first}).",
                          "the file is truncated or not a torch .pth; copy or download it again.")


TIME_STATE = ".att.time_state"


def split_time_state(sd: StateDict, source: str = "checkpoint") -> tuple[StateDict, list[torch.Tensor] | None]:
    """(the weights, the per-layer ``blocks.N.att.time_state`` tensors or None): a state-tuned checkpoint
    carries a trained initial wkv state per layer next to the usual weights."""
    keys = sorted((k for k in sd if k.endswith(TIME_STATE)), key=lambda k: int(k.split(".")[1]))
    if not keys:
        return sd, None
    rest = {k: v for k, v in sd.items() if not k.endswith(TIME_STATE)}
    return rest, [sd[k] for k in keys]


def initial_wkv(time_state: list[torch.Tensor], cfg: RWKVConfig, source: str) -> torch.Tensor:
    """The model's starting wkv state (L, H, N, N) from the checkpoint's time_state tensors, oriented as the
    official loaders do: RWKV-6 transposes the last two axes (rwkv pip package, v5/v6 path), RWKV-7 keeps
    them (its [value, key] layout is the checkpoint's)."""
    H, N = cfg.n_head, cfg.head_size
    if len(time_state) != cfg.n_layer:
        raise EdgesmithError(f"{source} has time_state for {len(time_state)} of {cfg.n_layer} layers.",
                             "give a time_state for every layer, or none.")
    out = []
    for i, t in enumerate(time_state):
        if tuple(t.shape) != (H, N, N):
            raise EdgesmithError(f"{source}: blocks.{i}.att.time_state has shape {tuple(t.shape)}, expected {(H, N, N)}.",
                                 "give the state-tuned checkpoint of this model.")
        t = t.float()
        out.append(t.transpose(1, 2) if cfg.version == 6 else t)
    return torch.stack(out)


def model_from_state_dict(sd: StateDict, source: str = "checkpoint") -> nn.Module:
    sd, time_state = split_time_state(sd, source)
    try:
        cfg = infer_config(sd, source)
    except EdgesmithError:
        raise
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:  # e.g. a 0-d tensor where a matrix goes
        raise EdgesmithError(f"{source} does not hold RWKV weights of the expected shapes ({type(e).__name__}: "
                             f"{str(e)[:120]}).", "give an official-layout RWKV-6/7 checkpoint.") from None
    sd = check_state_dict(sd, cfg, source)
    model = build_model(cfg)
    model.load_state_dict(sd, strict=True)
    if time_state is not None:
        model.init_wkv = initial_wkv(time_state, cfg, source)
    return model.eval()


def load_rwkv(path: str | os.PathLike, trust: bool = False) -> nn.Module:
    """An official-layout RWKV-6/7 ``.pth`` file -> ``RWKV6``/``RWKV7`` in eval mode, fp32 (``trust``: see
    ``read_state_dict``)."""
    return model_from_state_dict(read_state_dict(path, trust), str(path))


def official_state_dict(model: nn.Module, dtype: torch.dtype = torch.float32) -> StateDict:
    """The model's tensors under their official names, contiguous, cast to ``dtype`` (with its time_state,
    oriented back, when it has a trained initial state)."""
    sd = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    init = getattr(model, "init_wkv", None)
    if init is not None:
        for i, s in enumerate(init):
            s = s.transpose(1, 2) if model.cfg.version == 6 else s
            sd[f"blocks.{i}{TIME_STATE}"] = s.detach().to("cpu", dtype).contiguous()
    return sd


def save_rwkv(model: nn.Module, path: str | os.PathLike, *, dtype: torch.dtype = torch.float32,
              force: bool = False) -> Path:
    """Write ``model`` as an official-layout ``.pth`` (atomically; an existing file needs ``force``)."""
    if not isinstance(model, (RWKV6, RWKV7)):
        raise EdgesmithError(f"save_rwkv got a {type(model).__name__}, not an RWKV6/RWKV7 model.",
                             "quantized models are saved with compress.rwkvquant.qcheckpoint.save_quantized.")
    path = Path(path)
    with atomic_path(path, force=force) as tmp:
        torch.save(official_state_dict(model, dtype), tmp)
    return path
