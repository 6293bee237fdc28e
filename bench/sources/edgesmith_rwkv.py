"""An RWKV model quantized by an edgesmith RWKV pass and saved (``compress.rwkvquant.save_quantized``: a .pth
marked ``edgesmith-rwkv-quant``, written beside every token-lm deploy's artifacts), so a deploy can be
rerun from it: deployed as it is (its step graph), not quantized again."""
from __future__ import annotations

from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, register_source
from edgesmith.bench.sources.rwkv_checkpoint import _is_edgesmith_quantized, rwkv_user_model


@register_source
class QuantizedRWKVSource(ModelSource):
    name = "edgesmith-rwkv-quantized"
    description = "an RWKV model quantized and saved by edgesmith (.pth), deployed as it is"
    options_help = "tokenizer=bytes|world, seq_len=128, eval_len=256"

    def matches(self, spec: str) -> bool:
        return Path(spec).suffix == ".pth" and _is_edgesmith_quantized(Path(spec))

    def load(self, spec: str, request: UserRequest):
        from edgesmith.compress.rwkvquant import load_quantized

        model = load_quantized(spec)
        return rwkv_user_model(model, Path(spec).name, request, ["already quantized by edgesmith: deployed as it is"],
                               unsupported={"requantize": "the model is already quantized"})
