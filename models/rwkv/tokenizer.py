"""Tokenizers of RWKV models: byte-level for the reference models (vocab 256), and the RWKV World
tokenizer (vocab 65536) for official checkpoints, from the ``rwkv`` package, which ships its vocabulary
(``rwkv_vocab_v20230424.txt``) and a pure-Python trie tokenizer. Chosen by the model's vocabulary size
or by name (``--model-option tokenizer=bytes|world``)."""
from __future__ import annotations

from importlib import resources

import numpy as np

from edgesmith.common import EdgesmithError

TOKENIZERS = {"bytes": 256, "world": 65536}


class ByteTokenizer:
    name, vocab_size = "bytes", 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64)

    def decode(self, tokens) -> str:
        return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


class WorldTokenizer:
    """The RWKV World tokenizer (greedy longest match over the official 65,536-entry vocabulary)."""

    name, vocab_size = "world", 65536

    def __init__(self):
        try:
            from rwkv.rwkv_tokenizer import TRIE_TOKENIZER
        except ImportError:
            raise EdgesmithError("the RWKV World tokenizer needs the rwkv package.",
                                 "pip install rwkv==0.8.32 (it ships the vocabulary).") from None
        vocab = resources.files("rwkv") / "rwkv_vocab_v20230424.txt"
        self._tok = TRIE_TOKENIZER(str(vocab))

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text), np.int64)

    def decode(self, tokens) -> str:
        return self._tok.decode([int(t) for t in tokens])


def tokenizer_for(vocab_size: int, name: str | None = None):
    """The tokenizer named ``name``, else the one whose vocabulary matches ``vocab_size``."""
    if name is None:
        name = next((n for n, v in TOKENIZERS.items() if v == vocab_size), None)
        if name is None:
            raise EdgesmithError(f"no tokenizer is known for a vocabulary of {vocab_size} tokens.",
                                 f"pass --model-option tokenizer=one of {', '.join(TOKENIZERS)}, or give token ids "
                                 "as .npy data.")
    if name not in TOKENIZERS:
        raise EdgesmithError(f"unknown tokenizer {name!r}.", f"use one of {', '.join(TOKENIZERS)}.")
    if TOKENIZERS[name] > vocab_size:
        raise EdgesmithError(f"the {name} tokenizer gives ids up to {TOKENIZERS[name] - 1} but the model has "
                             f"{vocab_size} tokens.", "pick the tokenizer the model was trained with.")
    return ByteTokenizer() if name == "bytes" else WorldTokenizer()
