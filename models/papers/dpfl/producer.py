"""The ``dpfl-logreg`` producer: logistic regression trained by DP federated learning over torchrun.

``build()`` launches the federated run (4 gloo processes hosting 40 clients, 10 participating per
round, noise cancellation at (1, 1e-5)-DP per sample by default; ``tiny=True``: 2 processes,
8 clients, a few rounds) and keeps the final model. The module is the linear logit x -> w.x + b
(one float32 output); the metric is test accuracy, the test log-loss is in ``extra``.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import cache_dir, torch_cached
from edgesmith.models.papers.distributed.launch import launch
from edgesmith.models.papers.dpfl.config import DPFLConfig
from edgesmith.models.papers.dpfl.worker import data_of

PROCESSES = 4


@register_producer
class DPFLLogReg(Producer):
    name = "dpfl-logreg"
    tiny_options = {"tiny": True}
    description = "logistic regression (32 features) by DP federated mu^2-SGD with noise cancellation, 40 clients"
    metric = Metric("accuracy", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, method: str = "cancel", m: int | None = None,
                 epsilon: float = 1.0, timeout_s: float = 600.0):
        super().__init__(seed=seed)
        self.tiny = tiny
        self.timeout_s = timeout_s
        base = dict(clients=8, per_client=40, m=4) if tiny else {}
        if m is not None:
            base["m"] = m
        self.config = DPFLConfig(seed=seed, method=method, epsilon=epsilon, **base)
        self.processes = 2 if tiny else PROCESSES

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.config.dim,)

    def _cache_path(self):
        key = repr((self.name, self.config.to_json(), self.processes, torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def _module(self, theta: torch.Tensor) -> nn.Module:
        lin = nn.Linear(self.config.dim, 1)
        with torch.no_grad():
            lin.weight.copy_(theta[:-1].reshape(1, -1).to(torch.float32))
            lin.bias.copy_(theta[-1:].to(torch.float32))
        return lin.eval()

    def build(self) -> "DPFLLogReg":
        def make():
            res = launch("edgesmith.models.papers.dpfl.worker", {"runs": [self.config.to_dict()]}, nproc=self.processes,
                         timeout_s=self.timeout_s)
            run = res.result["runs"][0]
            info = {k: run[k] for k in ("sigma", "epsilon_spent", "excess_loss", "rounds", "bytes_sent_per_worker")}
            return {"theta": torch.tensor(run["theta"], dtype=torch.float64), "info": {**info, "launch": res.to_dict()}}

        def checked(state):
            if tuple(state["theta"].shape) != (self.config.dim + 1,):
                raise ValueError("cached model has the wrong shape")
            return state

        state, _ = torch_cached(self._cache_path(), make, load=checked)
        self.run_info_ = state["info"]
        self.module_ = self._module(state["theta"])
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        data = data_of(self.config)
        per = max(1, -(-n // self.config.clients))
        x = np.concatenate([data.client(i)[0][:per] for i in range(self.config.clients)])
        return np.ascontiguousarray(x[:n])

    def evaluate(self, predict) -> Evaluation:
        x, y = data_of(self.config).test_set()
        z = np.asarray(predict(x), dtype=np.float64).reshape(-1)
        acc = float(np.mean((z > 0) == (y > 0.5)))
        test_loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
        return Evaluation(self.metric, acc, len(y), extra={"test_log_loss": test_loss})

    def report_notes(self) -> list[str]:
        notes = ["Training ran outside the graph: DP federated mu^2-SGD over torchrun worker processes "
                 "(gloo on CPU); the exported graph is only the final linear logit."]
        info = getattr(self, "run_info_", None)
        if info and info.get("epsilon_spent") is not None:
            notes.append(f"Privacy: ({info['epsilon_spent']:.3g}, {self.config.delta:g})-DP per training sample "
                         f"({self.config.method}, sigma {info['sigma']:.3g}, {info['rounds']} rounds, "
                         f"{self.config.m} of {self.config.clients} clients per round).")
        return notes
