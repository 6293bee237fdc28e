"""An official-layout RWKV-6/7 checkpoint (``.pth``, BlinkDL layout, fp32/fp16/bf16; detected by its keys),
deployed as a ``token-lm`` model. A state-tuned checkpoint's ``blocks.N.att.time_state`` becomes the
model's starting state, as the official loader does.

Data: UTF-8 text (a file or a folder of .txt) for ``--calibration-data`` and ``--eval-data``, tokenized
with the model's tokenizer: byte-level for vocabulary 256, the RWKV World tokenizer for 65536
(``--model-option tokenizer=bytes|world`` to choose). Options: ``tokenizer``, ``seq_len`` (calibration
window, 128), ``eval_len`` (evaluation window, 256).
"""
from __future__ import annotations

from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, register_source
from edgesmith.bench.sources.token_data import text_data


def rwkv_user_model(model, label: str, request: UserRequest, notes: list[str], unsupported: dict | None = None):
    from edgesmith.models.rwkv.tokenizer import tokenizer_for
    from edgesmith.models.user import UserModel
    from edgesmith.models.user_data import TensorSpec

    tok = tokenizer_for(model.cfg.vocab_size, request.take("tokenizer"))
    cal, windows = text_data(request, tok)
    notes = notes + [f"{tok.name} tokenizer (vocabulary {tok.vocab_size}); RWKV-{model.cfg.version}, "
                     f"{model.cfg.n_layer} layers x {model.cfg.n_embd}"]
    if getattr(model, "init_wkv", None) is not None:
        notes.append("starts from the checkpoint's trained time_state (as the official loader does)")
    return UserModel(label=label, kind="token-lm", native_format="torch", module=model,
                     inputs=[TensorSpec("tokens", "int64", (None,))], calibration=cal, eval_windows=windows,
                     metric=request.metric, vocab_size=model.cfg.vocab_size, notes=tuple(notes),
                     unsupported=unsupported, seed=request.seed)


@register_source
class RWKVCheckpointSource(ModelSource):
    name = "rwkv-checkpoint"
    description = "an official RWKV-6/7 .pth checkpoint (time_state loaded as the initial state), token-lm"
    options_help = "tokenizer=bytes|world, seq_len=128, eval_len=256"

    def matches(self, spec: str) -> bool:
        return Path(spec).suffix == ".pth" and not _is_edgesmith_quantized(Path(spec))

    def load(self, spec: str, request: UserRequest):
        from edgesmith.models.rwkv.checkpoint import load_rwkv

        return rwkv_user_model(load_rwkv(spec, request.trust_model_file), Path(spec).name, request, [])


def _is_edgesmith_quantized(path: Path) -> bool:
    """Whether ``path`` is a quantized checkpoint edgesmith wrote (its zip holds the format marker)."""
    import zipfile

    if not path.is_file():  # a FIFO would block the read: the loader says what it is
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("data.pkl") and b"edgesmith-rwkv-quant" in z.read(n) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False
