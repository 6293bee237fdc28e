"""Producer ``tsv-rwkv``: hallucination detection with a truthfulness separator vector on RWKV-7.

Build: the shipped ``rwkv7-ref`` byte LM is fine-tuned on true statements of a synthetic fact world
(``models.papers.tsv.facts``), then TSV is trained on 32 labelled responses plus Sinkhorn pseudo-labelled
unlabelled ones (``models.papers.tsv.method``). The module (``TSVDetector``) maps one packed response,
byte ids as float32 (batch, seq_len), to p(truthful) (batch, 1); the metric is the AUROC of that
probability on held-out responses (truthful positive), about facts whose questions no labelled or
unlabelled training response asked.

Seeds: ``world_seed`` fixes the world and the LM fine-tuning (cached once per world), ``seed`` the
response splits, the exemplar draw and the TSV training, so seeds of the detector share one LM.
Default build: 300 fine-tuning steps (about 90 s on one quiet core) plus a few seconds of TSV.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import EdgesmithError, cache_dir, cached, torch_cached
from edgesmith.models.papers.ood.config import Config
from edgesmith.models.papers.ood.scores import auroc
from edgesmith.models.rwkv.checkpoint import load_rwkv, model_from_state_dict
from edgesmith.models.rwkv.train import reference_paths
from edgesmith.models.papers.tsv.facts import WorldConfig, make_world, pack, qa_examples
from edgesmith.models.papers.tsv.finetune import FinetuneConfig, finetune, recall
from edgesmith.models.papers.tsv.method import SteeredRWKV, TSVConfig, TSVDetector, train_tsv


@dataclass(frozen=True)
class SplitConfig(Config):
    n_exemplars: int = 32
    test_fraction: float = 0.34

    def validate(self) -> None:
        self._need_int("n_exemplars", 2)
        self._need_float("test_fraction", 0.0, 0.9)


@dataclass
class Splits:
    exemplars: np.ndarray
    exemplar_labels: np.ndarray
    wild: np.ndarray
    wild_labels: np.ndarray  # hidden from training; only for reporting pseudo-label quality
    test: np.ndarray
    test_labels: np.ndarray


def base_lm():
    """The shipped RWKV-7 reference model (trained by its producer if the weights were deleted)."""
    pth, _ = reference_paths(7)
    if pth.exists():
        return load_rwkv(pth)
    from edgesmith.models import get_producer

    return get_producer("rwkv7-ref").build().module


@register_producer
class TSVRWKV(Producer):
    name = "tsv-rwkv"
    tiny_options = {"tiny": True}
    description = "TSV hallucination detector on RWKV-7 fine-tuned on synthetic facts (paper 18)"
    metric = Metric("auroc", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, world_seed: int = 0, steps: int | None = None):
        super().__init__(seed=seed)
        self.tiny = bool(tiny)
        self.world_seed = int(world_seed)
        self.world_cfg = (WorldConfig(n_entities=10, n_judge_entities=4, seq_len=32) if self.tiny else WorldConfig())
        default_steps = 12 if self.tiny else 300
        self.ft_cfg = FinetuneConfig(steps=default_steps if steps is None else steps)
        self.split_cfg = SplitConfig(n_exemplars=16 if self.tiny else 32)
        self.tsv_cfg = (TSVConfig(init_epochs=2, aug_epochs=2, n_selected=16, batch=16) if self.tiny
                        else TSVConfig())

    # --- data ----------------------------------------------------------------------------------
    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.world_cfg.seq_len,)

    def world(self):
        if not hasattr(self, "world_"):
            self.world_ = make_world(self.world_cfg, self.world_seed)
        return self.world_

    def splits(self) -> Splits:
        """Questions split by (entity, attribute) pair: test pairs are never asked in training responses."""
        if not hasattr(self, "splits_"):
            w = self.world()
            rng = np.random.default_rng(self.seed)
            pairs = w.detection_pairs()
            order = rng.permutation(len(pairs))
            n_test = max(1, int(round(self.split_cfg.test_fraction * len(pairs))))
            test_pairs = [pairs[i] for i in order[:n_test]]
            train_pairs = [pairs[i] for i in order[n_test:]]
            tr_text, tr_y = qa_examples(w, train_pairs, rng)
            te_text, te_y = qa_examples(w, test_pairs, rng)
            tr_tok, te_tok = pack(tr_text, self.world_cfg.seq_len), pack(te_text, self.world_cfg.seq_len)
            k = self.split_cfg.n_exemplars
            if k >= len(tr_y):
                raise EdgesmithError(f"{k} exemplars leave no unlabelled responses ({len(tr_y)} in training).",
                                     "use fewer exemplars or a larger world.")
            perm = rng.permutation(len(tr_y))
            ex, wild = perm[:k], perm[k:]
            self.splits_ = Splits(tr_tok[ex], tr_y[ex], tr_tok[wild], tr_y[wild], te_tok, te_y)
        return self.splits_

    def calibration_data(self, n: int = 128) -> np.ndarray:
        """Unlabelled training responses (byte ids as float32)."""
        w = self.splits().wild
        return np.ascontiguousarray(w[: min(n, len(w))].astype(np.float32))

    # --- model ---------------------------------------------------------------------------------
    def _key(self, *parts) -> str:
        return hashlib.sha256(repr(parts + (torch.__version__,)).encode()).hexdigest()[:16]

    def _lm_cache(self):
        k = self._key("lm", self.world_seed, self.world_cfg.to_json(), self.ft_cfg.to_json())
        return cache_dir() / "models" / f"{self.name}-lm-{k}.pt"

    def _tsv_cache(self):
        k = self._key("tsv", self.seed, self._lm_cache().name, self.split_cfg.to_json(), self.tsv_cfg.to_json())
        return cache_dir() / "models" / f"{self.name}-{k}.pt"

    def finetuned_lm(self):
        """The LM fine-tuned on the world (cached; a damaged entry is retrained)."""
        if hasattr(self, "lm_"):
            return self.lm_
        path = self._lm_cache()

        def make():
            lm = base_lm()
            self.finetune_facts_ = finetune(lm, self.world(), self.ft_cfg, self.world_seed)
            return lm

        self.lm_, _ = cached(path, make, load=lambda p: model_from_state_dict(torch.load(p, weights_only=True), str(p)),
                             save=lambda lm, tmp: torch.save(lm.state_dict(), tmp))
        self.lm_.eval()
        return self.lm_

    def build(self) -> "TSVRWKV":
        lm = self.finetuned_lm()
        def make():
            s = self.splits()
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                res = train_tsv(lm, s.exemplars, s.exemplar_labels, s.wild, self.tsv_cfg, seed=self.seed)
            finally:
                torch.set_num_threads(threads)
            self.history_ = res.history
            return {"v": res.steered.v.detach().clone(), "prototypes": res.prototypes}

        d, _ = torch_cached(self._tsv_cache(), make)
        steered = SteeredRWKV(lm, self.tsv_cfg.layer, self.tsv_cfg.lam)
        steered.v.data.copy_(d["v"])
        self.module_ = TSVDetector(steered, d["prototypes"], self.tsv_cfg.kappa).eval()
        return self

    def fact_recall(self) -> float:
        """How many facts the fine-tuned LM knows (true value ranked first among its attribute's values)."""
        return recall(self.finetuned_lm(), self.world(), self.world_cfg.seq_len)

    # --- evaluation ----------------------------------------------------------------------------
    def evaluate(self, predict) -> Evaluation:
        s = self.splits()
        p = np.asarray(predict(s.test.astype(np.float32)), dtype=np.float64).reshape(len(s.test), -1)[:, -1]
        value = auroc(p[s.test_labels == 1], p[s.test_labels == 0])
        acc = float(np.mean((p > 0.5) == (s.test_labels == 1)))
        return Evaluation(self.metric, value, len(s.test), {"accuracy_at_0.5": acc,
                                                             "positive": "truthful response"})

    def report_notes(self) -> list[str]:
        return ["The LM fine-tuning, the TSV training and the Sinkhorn pseudo-labelling run at build time, outside "
                "the exported graph; the graph is the steered RWKV-7 plus the prototype head (p(truthful)).",
                "Inputs are byte ids passed as float32 and rounded to int64 inside the graph; int8 and int4 "
                "quantize the RWKV linears, the embedding and the steering vector stay in float."]
