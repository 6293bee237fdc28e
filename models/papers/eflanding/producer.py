"""The ``ef-landing-pca`` producer: a PCA projection learned by EF-Landing across torchrun workers.

``build()`` launches the distributed run (4 gloo processes by default; ``tiny=True``: 2 processes,
fewer iterations) and keeps the learned X (n x p). The deployed module is the linear map
x -> x X X^T (project onto the p components and reconstruct); its metric is the explained-variance
ratio 1 - ||x - x_hat||^2 / ||x||^2 on held-out samples of every worker, so the same number scores
the fp32 model and its int8/int4 exports. ``extra`` carries the best ratio any rank-p projection
reaches on that test set (top-p eigenvectors of its covariance) and the gap to it.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import EdgesmithError, cache_dir, torch_cached
from edgesmith.models.papers.distributed.launch import launch
from edgesmith.models.papers.eflanding.config import EFLandingConfig
from edgesmith.models.papers.eflanding.pca import explained_variance_ratio
from edgesmith.models.papers.eflanding.worker import problem_of

TEST_PER_WORKER = 250


class PCAReconstruction(nn.Module):
    """x -> (x X) X^T as two bias-free linears (encoder n -> p, decoder p -> n)."""

    def __init__(self, x: torch.Tensor):
        super().__init__()
        n, p = x.shape
        self.encode = nn.Linear(n, p, bias=False)
        self.decode = nn.Linear(p, n, bias=False)
        with torch.no_grad():
            self.encode.weight.copy_(x.T.to(torch.float32))
            self.decode.weight.copy_(x.to(torch.float32))

    def forward(self, x):
        return self.decode(self.encode(x))


@register_producer
class EFLandingPCA(Producer):
    name = "ef-landing-pca"
    tiny_options = {"tiny": True}
    description = "PCA (n 50, p 5) learned by EF-Landing: 4 torchrun workers, top-k 10% + error feedback"
    metric = Metric("explained_variance_ratio", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, compressor: str = "topk:0.1", ef_mode: str = "ef21",
                 iters: int | None = None, timeout_s: float = 600.0):
        super().__init__(seed=seed)
        self.tiny = tiny
        self.timeout_s = timeout_s
        base = dict(workers=2, samples_per_worker=200, iters=200) if tiny else {}
        if iters is not None:
            base["iters"] = iters
        self.config = EFLandingConfig(seed=seed, compressor=compressor, ef_mode=ef_mode, log_every=50, **base)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.config.n,)

    def _cache_path(self):
        key = repr((self.name, self.config.to_json(), torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self) -> "EFLandingPCA":
        def make():
            res = launch("edgesmith.models.papers.eflanding.worker", {"runs": [self.config.to_dict()]},
                         nproc=self.config.workers, timeout_s=self.timeout_s)
            run = res.result["runs"][0]
            x = torch.tensor(run["x"], dtype=torch.float64)
            if not torch.isfinite(x).all():
                raise EdgesmithError("EF-Landing diverged (non-finite X).", "lower eta or use a milder compressor.")
            h = run["history"]
            return {"x": x, "info": {"gap": h["gap"][-1], "feasibility": h["feasibility"][-1],
                                     "floats_sent_per_worker": h["floats_sent_per_worker"][-1],
                                     "launch": res.to_dict()}}

        def checked(state):
            if tuple(state["x"].shape) != (self.config.n, self.config.p):
                raise ValueError("cached X has the wrong shape")
            return state

        state, _ = torch_cached(self._cache_path(), make, load=checked)
        self.x_, self.run_info_ = state["x"], state["info"]
        self.module_ = PCAReconstruction(self.x_).eval()
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        prob = problem_of(self.config)
        per = max(1, -(-n // self.config.workers))
        x = np.concatenate([prob.samples(w, per, "calibration") for w in range(self.config.workers)])
        return np.ascontiguousarray(x[:n])

    def test_data(self) -> np.ndarray:
        prob = problem_of(self.config)
        return np.concatenate([prob.samples(w, TEST_PER_WORKER, "test") for w in range(self.config.workers)])

    def evaluate(self, predict) -> Evaluation:
        x = self.test_data()
        evr = explained_variance_ratio(x, np.asarray(predict(x)))
        cov = x.astype(np.float64).T @ x / len(x)
        top = np.linalg.eigvalsh(cov)[-self.config.p:].sum()
        best = float(top / np.trace(cov))
        return Evaluation(self.metric, evr, len(x), extra={"best_rank_p_evr": best, "evr_gap": best - evr})

    def report_notes(self) -> list[str]:
        info = getattr(self, "run_info_", None)
        notes = ["Training ran outside the graph: EF-Landing over torchrun worker processes (gloo on CPU); "
                 "the exported graph is only the learned projection x -> x X X^T."]
        if info:
            notes.append(f"Training run: optimality gap {info['gap']:.2e}, ||X^T X - I||_F {info['feasibility']:.2e}, "
                         f"{info['floats_sent_per_worker']:.0f} floats sent per worker "
                         f"({self.config.compressor}, {self.config.ef_mode}).")
        return notes
