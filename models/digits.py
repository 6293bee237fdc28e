"""Classifiers on scikit-learn's bundled 8x8 digits (1797 images, no download), trained here.

``digits-mlp`` is the small reference model of the vertical slice. ``digits-wide`` has three
1024-wide hidden layers so its time goes into MatMul, the shape where int8 kernels pay off.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn

from edgesmith.models.base import Evaluation, Metric, Producer, SplitEvaluation, register_producer, split_indices
from edgesmith.common import cache_dir, load_or_train, seed_everything


def _load_digits_split(seed: int):
    """Fixed stratified 80/20 split; pixel values scaled to [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


class DigitsMLP(Producer):
    """An MLP with ReLU hidden layers; ``hidden`` sets the widths."""

    metric = Metric("accuracy", higher_is_better=True, unit="fraction")
    hidden: tuple[int, ...] = (128, 64)
    epochs: int = 60
    lr: float = 3e-3

    def __init__(self, seed: int = 0):
        super().__init__(seed=seed)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (64,)

    def _split(self):
        if not hasattr(self, "split_"):
            self.split_ = _load_digits_split(self.seed)
        return self.split_

    def _make_module(self) -> nn.Module:
        layers: list[nn.Module] = []
        width = 64
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 10))
        return nn.Sequential(*layers)

    def _cache_path(self):
        key = f"{self.name}|{self.seed}|{self.hidden}|{self.epochs}|{self.lr}|{torch.__version__}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return cache_dir() / "models" / f"{self.name}-seed{self.seed}-{digest}.pt"

    def build(self) -> "DigitsMLP":
        """Train (deterministically for the seed), or load the identical weights cached by an earlier run."""
        seed_everything(self.seed)
        module = self._make_module()
        load_or_train(module, self._cache_path(), lambda: self._fit(module))
        self.module_ = module.eval()
        return self

    def _fit(self, module) -> None:
        x_tr, _, y_tr, _ = self._split()
        opt = torch.optim.Adam(module.parameters(), lr=self.lr)
        xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
        gen = torch.Generator().manual_seed(self.seed)
        module.train()
        threads = torch.get_num_threads()
        # small batches: one thread is faster (no sync overhead) and makes the result independent of core count
        torch.set_num_threads(1)
        try:
            self._train(module, opt, xt, yt, gen)
        finally:
            torch.set_num_threads(threads)

    def _train(self, module, opt, xt, yt, gen) -> None:
        for _ in range(self.epochs):
            perm = torch.randperm(len(xt), generator=gen)
            for i in range(0, len(xt), 64):
                idx = perm[i : i + 64]
                opt.zero_grad()
                loss = nn.functional.cross_entropy(module(xt[idx]), yt[idx])
                loss.backward()
                opt.step()

    def training_data(self):
        """(inputs, integer labels) of the training split: what QAT passes fine-tune on."""
        x_tr, _, y_tr, _ = self._split()
        return x_tr, y_tr

    def calibration_data(self, n: int = 128) -> np.ndarray:
        x_tr = self._split()[0]
        rng = np.random.default_rng(self.seed)
        idx = rng.permutation(len(x_tr))[: min(n, len(x_tr))]
        return np.ascontiguousarray(x_tr[np.sort(idx)])

    def test_data(self) -> tuple[np.ndarray, np.ndarray]:
        _, x_te, _, y_te = self._split()
        return x_te, y_te

    def ood_inputs(self) -> dict[str, np.ndarray]:
        """Held-out digits, and three shifts of them for the OOD monitor: uniform-noise images,
        digits rotated by 90 degrees and digits with inverted intensities (all in [0, 1])."""
        x_te = self.test_data()[0]
        rng = np.random.default_rng(self.seed + 1)
        rotated = np.rot90(x_te.reshape(-1, 8, 8), k=1, axes=(1, 2)).reshape(len(x_te), 64)
        return {"id": x_te, "noise": rng.uniform(0.0, 1.0, x_te.shape).astype(np.float32),
                "rotated": np.ascontiguousarray(rotated), "inverted": (1.0 - x_te).astype(np.float32)}

    def evaluate(self, predict) -> Evaluation:
        x_te, y_te = self.test_data()
        logits = np.asarray(predict(x_te))
        acc = float(np.mean(np.argmax(logits, axis=-1) == y_te))
        return Evaluation(self.metric, acc, len(y_te))

    def evaluate_split(self, predict, fraction: float, seed: int) -> SplitEvaluation | None:
        x_te, y_te = self.test_data()
        parts = split_indices(len(y_te), fraction, seed)
        if parts is None:
            return None
        hits = np.argmax(np.asarray(predict(x_te)), axis=-1) == y_te
        whole, val, held = (Evaluation(self.metric, float(np.mean(hits[i])), int(hits[i].size))
                            for i in (slice(None), *parts))
        return SplitEvaluation(whole, val, held)


@register_producer
class DigitsSmall(DigitsMLP):
    name = "digits-mlp"
    description = "MLP 64-128-64-10 on sklearn digits (trained here in about a second)"
    hidden = (128, 64)


@register_producer
class DigitsWide(DigitsMLP):
    name = "digits-wide"
    description = "MatMul-heavy MLP 64-1024-1024-1024-10 on sklearn digits"
    hidden = (1024, 1024, 1024)
    epochs = 20
    lr = 1e-3
