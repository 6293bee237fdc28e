"""Text every machine has: the Python standard library's own ``.py`` sources, as bytes.

Tokenizer: raw UTF-8 bytes (vocab 256), so nothing is downloaded and any text round-trips. The
split is fixed by file name: a file goes to the evaluation split when crc32 of its relative path
is divisible by ``EVAL_MODULUS``, so the split never depends on file order, and calibration (which
reads only the training split) can never see evaluation text. Only top-level stdlib modules are
read (sorted, capped in bytes) to keep loading fast and the corpus stable across machines.

A third, validation split (``load_validation``) is for choosing settings (e.g. RWKVQuant's
threshold) without touching the evaluation split: the non-evaluation files that come after the
training cap in name order, so neither training nor evaluation ever read them.
"""
from __future__ import annotations

import hashlib
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError

EVAL_MODULUS = 10
VOCAB_SIZE = 256


def encode(text: str) -> np.ndarray:
    """UTF-8 bytes as int64 token ids."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def decode(tokens) -> str:
    return bytes(int(t) for t in np.asarray(tokens).ravel()).decode("utf-8", errors="replace")


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """Top-level ``*.py`` files of the standard library, sorted by name."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise EdgesmithError(f"no Python sources found in {root}.", "point root at a Python standard library folder.")
    return files


def is_eval_file(name: str) -> bool:
    return zlib.crc32(name.encode()) % EVAL_MODULUS == 0


@dataclass
class TextSplits:
    train: np.ndarray  # int64 byte tokens
    eval: np.ndarray
    train_files: list[str]
    eval_files: list[str]

    def fingerprint(self) -> str:
        """A short hash of both splits: reports name exactly which text was used."""
        h = hashlib.sha256(self.train.astype(np.uint8).tobytes())
        h.update(b"|")
        h.update(self.eval.astype(np.uint8).tobytes())
        return h.hexdigest()[:16]


def load_splits(max_train_bytes: int = 3_000_000, max_eval_bytes: int = 300_000,
                root: str | Path | None = None) -> TextSplits:
    """The fixed train/eval split of stdlib text, each capped (files are taken whole, in name order)."""
    train, evals, tf, ef = [], [], [], []
    n_train = n_eval = 0
    for p in stdlib_files(root):
        data = p.read_bytes()
        if is_eval_file(p.name):
            if n_eval < max_eval_bytes:
                evals.append(data), ef.append(p.name)
                n_eval += len(data)
        elif n_train < max_train_bytes:
            train.append(data), tf.append(p.name)
            n_train += len(data)
    if not train or not evals:
        raise EdgesmithError("the standard library text is too small for a train/eval split.",
                             "point root at a full Python standard library.")
    as_tokens = lambda chunks, cap: np.frombuffer(b"".join(chunks)[:cap], dtype=np.uint8).astype(np.int64)  # noqa: E731
    return TextSplits(as_tokens(train, max_train_bytes), as_tokens(evals, max_eval_bytes), tf, ef)


def sequences(tokens: np.ndarray, seq_len: int, n: int | None = None, *, seed: int | None = None) -> np.ndarray:
    """(n, seq_len) windows: non-overlapping from the start when ``seed`` is None, else random starts."""
    if len(tokens) < seq_len + 1:
        raise EdgesmithError(f"the text has {len(tokens)} tokens, fewer than seq_len+1 = {seq_len + 1}.",
                             "use a shorter sequence length or more text.")
    if seed is None:
        total = len(tokens) // seq_len
        n = total if n is None else min(n, total)
        return tokens[: n * seq_len].reshape(n, seq_len).copy()
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(tokens) - seq_len, size=n or 1)
    return np.stack([tokens[s:s + seq_len] for s in starts])


def load_validation(max_bytes: int = 300_000, *, max_train_bytes: int = 3_000_000,
                    root: str | Path | None = None) -> tuple[np.ndarray, list[str]]:
    """Validation tokens and their files: non-evaluation files past the training cap, in name order.

    ``max_train_bytes`` must be the cap the model was trained with (``load_splits``' default), so
    the files are exactly those training stopped before; the evaluation split is never read.
    """
    n_train, chunks, names, n = 0, [], [], 0
    for p in stdlib_files(root):
        if is_eval_file(p.name):
            continue
        if n_train < max_train_bytes:  # the same walk as load_splits: this file is (partly) training text
            n_train += p.stat().st_size
            continue
        if n >= max_bytes:
            break
        data = p.read_bytes()
        chunks.append(data), names.append(p.name)
        n += len(data)
    if not chunks:
        raise EdgesmithError(f"no standard library files are left after the {max_train_bytes}-byte training cap.",
                             "lower max_train_bytes or point root at a full Python standard library.")
    return np.frombuffer(b"".join(chunks)[:max_bytes], dtype=np.uint8).astype(np.int64), names
