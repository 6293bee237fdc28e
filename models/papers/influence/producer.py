"""The ``noise-cnn`` producer: a two-layer ReLU^q CNN trained on two-patch feature-noise data.

Inputs are the two patches ``(2, d)`` of a sample, the output the class scores ``[F_-, F_+]``; the
metric is test accuracy (all test samples), with the accuracy on atypical (mu = 0) and typical test
samples in ``Evaluation.extra``: atypical samples can only be classified through the noise the
network memorised, the paper's implicit features. ``class_dependence`` 0 gives equal noise
covariances, 1 (default) disjoint class subspaces. ``tiny=True`` is the seconds-long test version.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import cache_dir, load_or_train
from edgesmith.models.papers.influence.cnn import TwoPatchCNN, train_gd
from edgesmith.models.papers.influence.config import CnnConfig, NoiseDataConfig
from edgesmith.models.papers.influence.data import load_splits


@register_producer
class NoiseCnn(Producer):
    name = "noise-cnn"
    tiny_options = {"tiny": True}
    description = "two-layer ReLU^q CNN on two-patch feature-noise data with class-dependent noise (paper 3)"
    metric = Metric("accuracy", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, class_dependence: float = 1.0, q: float = 2.0,
                 steps: int | None = None):
        super().__init__(seed=seed)
        self.tiny = tiny
        size = dict(d=40, n_train=60, n_test=400) if tiny else {}
        self.data_cfg = NoiseDataConfig(class_dependence=class_dependence, seed=seed, **size)
        self.cnn_cfg = CnnConfig(q=q, m=8 if tiny else 20,
                                 steps=steps if steps is not None else (150 if tiny else 500))

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (2, self.data_cfg.d)

    def splits(self):
        if not hasattr(self, "splits_"):
            self.splits_ = load_splits(self.data_cfg)
        return self.splits_

    def _cache_path(self):
        key = repr((self.name, self.data_cfg.to_dict(), self.cnn_cfg.to_dict(), torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "NoiseCnn":
        """Train by gradient descent (deterministic for the seed) or load the same weights from the cache."""
        model = TwoPatchCNN(self.data_cfg.d, self.cnn_cfg, seed=self.seed)
        train = lambda: train_gd(model, self.splits()["train"].x, self.splits()["train"].y, self.cnn_cfg)  # noqa: E731
        history = load_or_train(model, self._cache_path(), train)
        if history is not None:
            self.history_ = history
        self.module_ = model.eval()
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        return np.ascontiguousarray(self.splits()["train"].x[:n])

    def training_data(self):
        """(inputs, class indices 0/1) of the training split: what QAT passes fine-tune on."""
        train = self.splits()["train"]
        return train.x, np.asarray(train.labels01, np.int64)

    def train_labels(self) -> np.ndarray:
        """Class index (0/1) of each training sample, in ``calibration_data`` order."""
        return self.splits()["train"].labels01

    def evaluate(self, predict, split: str = "test") -> Evaluation:
        data = self.splits()[split]
        pred = np.argmax(np.asarray(predict(data.x)), axis=-1)
        hit = pred == data.labels01
        at = data.atypical
        extra = {"atypical_accuracy": float(hit[at].mean()) if at.any() else float("nan"),
                 "typical_accuracy": float(hit[~at].mean()) if (~at).any() else float("nan"),
                 "n_atypical": int(at.sum()), "class_dependence": self.data_cfg.class_dependence}
        return Evaluation(self.metric, float(hit.mean()), len(hit), extra=extra)
