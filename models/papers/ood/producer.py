"""Producer ``ood-gauss``: a small MLP classifier on Gaussian ID classes, judged as an OOD detector.

The module maps (batch, dim) inputs to ONE tensor (batch, n_classes + hidden[-1]): the logits
followed by the penultimate features, so MSP and energy (from the logits) and Mahalanobis (from the
features) can all be computed from the output of any runtime, fp32 or compressed
(``split_outputs``). The metric is the Mahalanobis AUROC of ID test data against the pooled OOD
sets (higher is better); every score's AUROC per OOD set, the oracle probe and the ID accuracy are
in ``Evaluation.extra``. Mahalanobis statistics are fitted on the training inputs with their true
labels, from the same ``predict`` that is being scored, so a compressed model is judged with its
own class means and covariance, as it would be deployed.

Default build: 3000 training points, 30 epochs of Adam, about a second on one core.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import EdgesmithError, cache_dir, module_cached, seed_everything
from edgesmith.common.checks import is_int
from edgesmith.models.papers.ood.config import Config
from edgesmith.models.papers.ood.data import OOD_SETS, GaussConfig, make_splits
from edgesmith.models.papers.ood.scores import SCORES, all_scores, auroc, fit_mahalanobis, oracle_probe_auroc


@dataclass(frozen=True)
class MLPConfig(Config):
    hidden: tuple[int, ...] = (64, 64)
    epochs: int = 30
    lr: float = 3e-3
    batch: int = 64

    def validate(self) -> None:
        if not self.hidden or any(not is_int(h, 2) for h in self.hidden):
            self._fail("hidden", f"is {self.hidden!r}", "give one or more layer widths of at least 2, e.g. (64, 64).")
        self._need_int("epochs", 1)
        self._need_int("batch", 1)
        self._need_float("lr", 0.0, 1.0)


class FeatureClassifier(nn.Module):
    """ReLU MLP; ``forward`` returns ``cat([logits, features], -1)`` (features = last hidden layer)."""

    def __init__(self, dim: int, n_classes: int, hidden: tuple[int, ...]):
        super().__init__()
        layers: list[nn.Module] = []
        width = dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_classes)
        self.n_classes = n_classes

    def forward(self, x):
        e = self.body(x)
        return torch.cat([self.head(e), e], dim=-1)


@register_producer
class OODGauss(Producer):
    name = "ood-gauss"
    tiny_options = {"tiny": True}
    description = "MLP on Gaussian ID classes; MSP / energy / Mahalanobis OOD scores (paper 6 toy)"
    metric = Metric("auroc_mahalanobis", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, shift: float | None = None):
        super().__init__(seed=seed)
        self.tiny = bool(tiny)
        base = GaussConfig.tiny() if self.tiny else GaussConfig()
        self.data_cfg = base if shift is None else GaussConfig.from_dict({**base.to_dict(), "shift": shift})
        self.model_cfg = MLPConfig(epochs=10 if self.tiny else 30)

    # --- model ---------------------------------------------------------------------------------
    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.data_cfg.dim,)

    def splits(self) -> dict[str, np.ndarray]:
        if not hasattr(self, "splits_"):
            self.splits_ = make_splits(self.data_cfg, self.seed)
        return self.splits_

    def _make_module(self) -> FeatureClassifier:
        return FeatureClassifier(self.data_cfg.dim, self.data_cfg.n_classes, self.model_cfg.hidden)

    def _cache_path(self):
        key = repr((self.name, self.seed, self.data_cfg.to_json(), self.model_cfg.to_json(), torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "OODGauss":
        self.module_ = module_cached(self._cache_path(), self._make_module, self._fit)[0]
        return self

    def _fit(self) -> FeatureClassifier:
        s, cfg = self.splits(), self.model_cfg
        seed_everything(self.seed)
        module = self._make_module()
        opt = torch.optim.Adam(module.parameters(), lr=cfg.lr)
        x, y = torch.from_numpy(s["x_train"]), torch.from_numpy(s["y_train"])
        gen = torch.Generator().manual_seed(self.seed)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # deterministic for the seed whatever the core count
        try:
            module.train()
            for _ in range(cfg.epochs):
                perm = torch.randperm(len(x), generator=gen)
                for i in range(0, len(x), cfg.batch):
                    idx = perm[i:i + cfg.batch]
                    logits = module(x[idx])[:, : module.n_classes]
                    loss = nn.functional.cross_entropy(logits, y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        finally:
            torch.set_num_threads(threads)
        return module.eval()

    # --- data ----------------------------------------------------------------------------------
    def calibration_data(self, n: int = 128) -> np.ndarray:
        x = self.splits()["x_train"]
        return np.ascontiguousarray(x[: min(n, len(x))])

    def ood_inputs(self) -> dict[str, np.ndarray]:
        s = self.splits()
        return {"id": s["x_test"], **{k: s[k] for k in OOD_SETS}}

    def split_outputs(self, outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, penultimate features) of a batch of module outputs."""
        out = np.asarray(outputs)
        k = self.data_cfg.n_classes
        want = k + self.model_cfg.hidden[-1]
        if out.ndim != 2 or out.shape[1] != want:
            raise EdgesmithError(f"{self.name} outputs have shape {out.shape}; expected (batch, {want}).",
                                 "pass the outputs of this producer's module (logits then features).")
        return out[:, :k], out[:, k:]

    # --- evaluation ----------------------------------------------------------------------------
    def evaluate(self, predict) -> Evaluation:
        s = self.splits()
        logits_tr, feats_tr = self.split_outputs(predict(s["x_train"]))
        fit = fit_mahalanobis(feats_tr, s["y_train"])
        logits_id, feats_id = self.split_outputs(predict(s["x_test"]))
        id_scores = all_scores(logits_id, feats_id, fit)
        per_set, pooled = {}, {k: [] for k in SCORES}
        for name in OOD_SETS:
            lo, fo = self.split_outputs(predict(s[name]))
            sc = all_scores(lo, fo, fit)
            per_set[name] = {k: auroc(id_scores[k], sc[k]) for k in SCORES}
            per_set[name]["oracle"] = oracle_probe_auroc(feats_id, fo, seed=self.seed)
            for k in SCORES:
                pooled[k].append(sc[k])
        pooled_auroc = {k: auroc(id_scores[k], np.concatenate(v)) for k, v in pooled.items()}
        acc = float(np.mean(np.argmax(logits_id, axis=1) == s["y_test"]))
        extra = {"id_accuracy": acc, "auroc": per_set, "pooled_auroc": pooled_auroc,
                 "convention": "AUROC of ID (positive) vs OOD, scores higher for ID; 0.5 = chance"}
        return Evaluation(self.metric, pooled_auroc["mahalanobis"], len(s["x_test"]), extra)

    def report_notes(self) -> list[str]:
        return ["The module outputs logits followed by penultimate features; the OOD scores (MSP, energy, "
                "Mahalanobis) and the oracle probe are computed outside the graph from those outputs."]
