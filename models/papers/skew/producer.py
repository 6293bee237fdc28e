"""The ``skew-spectrum`` producer: classify the diameter of 7-node graphs from their skew spectrum.

Data: all 1044 graphs with 7 nodes of networkx's graph atlas (no download), as flattened 7x7
adjacency matrices. Label: a diameter class (0: disconnected, 1: diameter <= 2, 2: diameter 3,
3: diameter >= 4), a global property the order-k spectrum (patterns of at most k edges) does not
read off directly. Stratified 80/20 split for the seed. Test graphs are shown under a random node
relabelling (seeded), so the metric also exercises the model's permutation invariance.

Model (``models.papers.skew.model``): the order-k spectrum (homomorphism counts of every pattern with at
most k edges, computed inside the exported graph with Einsum), log1p, a standardisation fitted on
training graphs, and an MLP. Metric: test accuracy. ``tiny=True``: k = 3, a narrower MLP, fewer epochs.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import Config, EdgesmithError, cache_dir, load_or_train
from edgesmith.common.checks import is_int
from edgesmith.models.papers.skew.model import SpectrumClassifier, train_classifier
from edgesmith.models.papers.skew.patterns import patterns

N_NODES = 7
CLASS_NAMES = ("disconnected", "diameter<=2", "diameter=3", "diameter>=4")


@dataclass(frozen=True)
class SkewConfig(Config):
    """Spectrum order ``k`` (2-4), MLP width, full-batch Adam settings, test fraction."""

    k: int = 4
    hidden: int = 64
    epochs: int = 400
    lr: float = 1e-2
    weight_decay: float = 1e-4
    test_fraction: float = 0.2

    def validate(self) -> None:
        if isinstance(self.k, bool) or self.k not in (2, 3, 4):
            self._fail("k", f"is {self.k!r}", "use a spectrum order of 2, 3 or 4.")
        for name in ("hidden", "epochs"):
            v = getattr(self, name)
            if not is_int(v, 1):
                self._fail(name, f"is {v!r}", f"use a positive whole number for {name}.")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            self._fail("lr", f"is {self.lr!r}", "use a learning rate between 0 and 1 (1e-2 is the default).")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            self._fail("weight_decay", f"is {self.weight_decay!r}", "use a non-negative weight decay.")
        if not (isinstance(self.test_fraction, (int, float)) and 0.05 <= self.test_fraction <= 0.5):
            self._fail("test_fraction", f"is {self.test_fraction!r}", "use a test fraction between 0.05 and 0.5.")


def atlas_graphs(n: int = N_NODES) -> list:
    """The networkx atlas graphs with exactly ``n`` nodes (1044 for n = 7), in atlas order."""
    import networkx as nx

    return [g for g in nx.graph_atlas_g() if g.number_of_nodes() == n]


def diameter_class(g) -> int:
    import networkx as nx

    if not nx.is_connected(g):
        return 0
    d = nx.diameter(g)
    return 1 if d <= 2 else (2 if d == 3 else 3)


@lru_cache(maxsize=2)
def _atlas_arrays(n: int) -> tuple[np.ndarray, np.ndarray]:
    import networkx as nx

    gs = atlas_graphs(n)
    a = np.stack([nx.to_numpy_array(g, nodelist=range(n), dtype=np.float32) for g in gs])
    y = np.array([diameter_class(g) for g in gs], dtype=np.int64)
    return a, y


def atlas_dataset(n: int = N_NODES) -> tuple[np.ndarray, np.ndarray]:
    """(adjacency (N, n, n) float32, diameter class (N,) int64) over the atlas graphs with n nodes (copies)."""
    a, y = _atlas_arrays(n)
    return a.copy(), y.copy()


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices (sorted) with each class split in the same proportion, seeded."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test.extend(idx[: int(round(test_fraction * len(idx)))])
    test = np.sort(np.array(test, dtype=np.int64))
    return np.setdiff1d(np.arange(len(y)), test), test


def permute_graphs(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each adjacency matrix relabelled by its own random permutation: P A P^T."""
    out = np.empty_like(a)
    for i in range(len(a)):
        p = rng.permutation(a.shape[1])
        out[i] = a[i][np.ix_(p, p)]
    return out


@register_producer
class SkewSpectrumProducer(Producer):
    name = "skew-spectrum"
    tiny_options = {"tiny": True}
    description = "order-k graph skew spectrum (in-graph Einsum counts) + MLP: diameter class of 7-node atlas graphs"
    metric = Metric("accuracy", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, k: int | None = None, epochs: int | None = None):
        super().__init__(seed=seed)
        self.tiny = tiny
        self.config = SkewConfig(k=k if k is not None else (3 if tiny else 4), hidden=32 if tiny else 64,
                                 epochs=epochs if epochs is not None else (150 if tiny else 400))

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (N_NODES * N_NODES,)

    def patterns(self):
        return patterns(self.config.k, N_NODES)

    def splits(self) -> dict:
        """Stratified train/test split of the atlas; test graphs relabelled by random permutations."""
        if not hasattr(self, "splits_"):
            a, y = atlas_dataset()
            idx_tr, idx_te = stratified_split(y, self.config.test_fraction, self.seed)
            rng = np.random.default_rng(self.seed + 1)
            flat = lambda m: np.ascontiguousarray(m.reshape(len(m), -1))  # noqa: E731
            self.splits_ = {"x_train": flat(a[idx_tr]), "y_train": y[idx_tr],
                            "x_test": flat(permute_graphs(a[idx_te], rng)), "x_test_plain": flat(a[idx_te]),
                            "y_test": y[idx_te]}
        return self.splits_

    def _make_module(self) -> SpectrumClassifier:
        torch.manual_seed(self.seed)
        return SpectrumClassifier(N_NODES, self.patterns(), self.config.hidden, len(CLASS_NAMES))

    def _cache_path(self):
        key = json.dumps([self.name, self.seed, self.config.to_dict(), torch.__version__], sort_keys=True)
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "SkewSpectrumProducer":
        module = self._make_module()

        def train():
            s, c = self.splits(), self.config
            self.losses_ = train_classifier(module, s["x_train"], s["y_train"], c.epochs, c.lr, c.weight_decay, self.seed)

        load_or_train(module, self._cache_path(), train)
        self.module_ = module.eval()
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        x = self.splits()["x_train"]
        idx = np.sort(np.random.default_rng(self.seed).permutation(len(x))[: min(n, len(x))])
        return np.ascontiguousarray(x[idx])

    def evaluate(self, predict) -> Evaluation:
        s = self.splits()
        out = np.asarray(predict(s["x_test"]))
        out_plain = np.asarray(predict(s["x_test_plain"]))
        acc = float(np.mean(np.argmax(out, -1) == s["y_test"]))
        counts = np.bincount(s["y_test"], minlength=len(CLASS_NAMES))
        extra = {
            "accuracy_unpermuted": float(np.mean(np.argmax(out_plain, -1) == s["y_test"])),
            "max_abs_output_change_under_relabelling": float(np.max(np.abs(out - out_plain))),
            "majority_baseline": float(counts.max() / counts.sum()),
            "k": self.config.k,
            "n_spectrum_features": len(self.patterns()),
            "classes": list(CLASS_NAMES),
        }
        return Evaluation(self.metric, acc, len(s["y_test"]), extra=extra)

    def check_input(self, x: np.ndarray) -> np.ndarray:
        x = super().check_input(x)
        a = x.reshape(len(x), N_NODES, N_NODES)
        if not np.all((a == 0) | (a == 1)) or not np.array_equal(a, np.swapaxes(a, 1, 2)) \
                or np.any(np.diagonal(a, axis1=1, axis2=2)):
            raise EdgesmithError("the input is not a batch of flattened 0/1 symmetric adjacency matrices without "
                                 "self-loops.", "pass nx.to_numpy_array(g).reshape(-1) for 7-node simple graphs.")
        return x

    def report_notes(self) -> list[str]:
        return [
            "The spectrum is computed inside the exported graph: homomorphism counts of the order-"
            f"{self.config.k} patterns as ONNX Einsum nodes on the adjacency (an invertible linear map of the "
            "k-correlation values); int8 QDQ and int4 leave the Einsums in fp32 (exact counts) and quantize the "
            "stacked log1p counts (int8 only) and the MLP's MatMuls.",
            "Test graphs are fed with their nodes randomly relabelled; the extra figures give the unrelabelled "
            "accuracy and the largest output change, which is zero up to rounding for an invariant model.",
        ]
