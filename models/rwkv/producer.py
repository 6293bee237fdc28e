"""Producers "rwkv6-ref" and "rwkv7-ref": the stdlib-text reference models. ``size="small"`` (default) is the
shipped 2 layers x 128 pair; ``size="large"`` (``model_options = { size = "large" }``) is 6 layers x 512 on
the same text, trained longer, kept in the cache and not shipped (``train.SIZES``).

Inputs are byte-token windows (int64, shape (seq_len,)); calibration windows come from the
training split only, evaluation is next-byte perplexity on the held-out split (lower is better).
``build`` loads ``models/rwkv/weights/rwkv{6,7}-ref.pth``; if a user deleted them it retrains
(``python -m edgesmith.models.rwkv.train --version N`` does the same from the command line). The large
ones are not retrained behind a user's back (hours on a CPU): a missing file is an error naming the command.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import EdgesmithError
from edgesmith.common.checks import is_int
from edgesmith.models.rwkv.checkpoint import load_rwkv, save_rwkv
from edgesmith.models.rwkv.data import load_splits, load_validation, sequences
from edgesmith.models.rwkv.train import SIZES, TrainSettings, reference_paths, train, window_nll


class RWKVReference(Producer):
    version: int = 7
    metric = Metric("perplexity", higher_is_better=False, unit="per byte")
    kind = "token-lm"
    vocab_size = 256  # byte-level
    seq_len: int = 128
    eval_seq_len: int = 256

    def __init__(self, seed: int = 0, eval_sequences: int = 64, validation: bool = False, size: str = "small"):
        super().__init__(seed=seed)
        self.eval_sequences = eval_sequences
        self.validation = validation
        self.size = size

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.seq_len,)

    def _splits(self):
        if not hasattr(self, "splits_"):
            self.splits_ = load_splits()
        return self.splits_

    def build(self) -> "RWKVReference":
        n = self.eval_sequences
        if not is_int(n, 1):
            raise EdgesmithError(f"eval_sequences is {n!r}.", "use a whole number of windows >= 1 (default 64).")
        if not isinstance(self.validation, bool):
            raise EdgesmithError(f"validation is {self.validation!r}.", "use true or false.")
        if self.size not in SIZES:
            raise EdgesmithError(f"size is {self.size!r}.", f"use one of {', '.join(map(repr, SIZES))}.")
        pth, _ = reference_paths(self.version, size=self.size)
        if not pth.exists() and self.size != "small":
            raise EdgesmithError(f"{self.name}: its weights {pth} are not there (they are trained here, not shipped).",
                                 f"train them: python -m edgesmith.models.rwkv.train --version {self.version} "
                                 f"--size {self.size} --device cuda (a few minutes on a GPU; many hours on --device cpu).")
        if not pth.exists():
            model, _ = train(TrainSettings(version=self.version, seed=self.seed))
            save_rwkv(model, pth, dtype=torch.float16)
        self.module_ = load_rwkv(pth)
        return self

    def weight_files(self) -> list:
        """The reference weights of this size: retrained in place (``train --force``), they change under the
        same producer name."""
        return [reference_paths(self.version, size=self.size)[0]] if self.size in SIZES else []

    def calibration_data(self, n: int = 128) -> np.ndarray:
        """``n`` random windows of the training split (seeded), int64 token ids."""
        return sequences(self._splits().train, self.seq_len, n, seed=self.seed + 1)

    def eval_windows(self) -> np.ndarray:
        return sequences(self._splits().eval, self.eval_seq_len + 1, self.eval_sequences)

    def heldout_windows(self, n: int) -> np.ndarray:
        """``n`` windows of the evaluation split that follow the ones ``evaluate`` reads, shaped like them: text
        that no score or choice has read, for a second, larger test of a ranking seen on the evaluation."""
        every = sequences(self._splits().eval, self.eval_seq_len + 1)
        free = len(every) - self.eval_sequences
        if not is_int(n, 1, free):
            raise EdgesmithError(f"{n!r} held-out windows asked for; the evaluation split has {max(free, 0)} past the "
                                 f"{self.eval_sequences} that evaluate reads.", f"ask for 1 to {max(free, 0)}.")
        return every[self.eval_sequences: self.eval_sequences + n]

    def validation_windows(self) -> np.ndarray:
        """Windows of the validation split (stdlib files past the training cap: never trained on, never
        in the evaluation split), shaped like the evaluation windows; for choosing settings."""
        if not hasattr(self, "validation_windows_"):  # read once: evaluate runs per variant and runtime
            tokens, _ = load_validation()
            self.validation_windows_ = sequences(tokens, self.eval_seq_len + 1, self.eval_sequences)
        return self.validation_windows_

    def evaluate(self, predict) -> Evaluation:
        """``predict``: int64 tokens (B, T) -> logits (B, T, 256). Perplexity on the evaluation split; the
        per-window NLLs (nats per byte) travel in ``extra`` for paired comparisons, and with
        ``validation=True`` the same for the validation split."""
        windows = self.eval_windows()
        try:
            nll = window_nll(predict, windows)
            extra = {"data": self._splits().fingerprint(), "window_nll": [round(float(v), 7) for v in nll]}
            if self.validation:
                val = window_nll(predict, self.validation_windows())
                extra.update(validation_perplexity=math.exp(float(val.mean())), validation_tokens=int(val.size) * self.eval_seq_len,
                             validation_window_nll=[round(float(v), 7) for v in val])
        except RuntimeError as e:
            raise EdgesmithError(f"evaluating {self.name} failed: {str(e)[:200]}",
                                 "predict must map int64 tokens (B, T) to logits (B, T, 256).") from None
        return Evaluation(self.metric, math.exp(float(nll.mean())), int(windows[:, 1:].size), extra)


@register_producer
class RWKV6Reference(RWKVReference):
    name = "rwkv6-ref"
    description = "RWKV-6, 2 layers x 128, head 32, byte LM trained here on stdlib text"
    version = 6


@register_producer
class RWKV7Reference(RWKVReference):
    name = "rwkv7-ref"
    description = "RWKV-7, 2 layers x 128, head 32, byte LM trained here on stdlib text"
    version = 7
