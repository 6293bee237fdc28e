"""``scaling-student``: the teacher, distilled students and a scaled-out router on scikit-learn digits.

One producer, three roles (paper 11, "AI scaling up, down and out", is a position paper with no
algorithm; this is the toolkit's reading of it):

* ``teacher=True``: scaling up, an MLP 64-256-256-10 trained with cross-entropy.
* default: scaling down, a student 64-w-w-10 (``width=w``) distilled from the teacher with ``kd_loss``
  (temperature 4, alpha 0.9).
* ``router=True``: scaling out, ``n_experts`` specialists 64-w-w-|group| (each distilled on its group's
  samples from the teacher's logits restricted to its classes, i.e. the teacher's p(c | group)) plus a
  gating MLP 64-16-n_experts distilled from the teacher's group probabilities; exported as one module
  (``ScaledOut``) with soft or hard gating inside the graph. Groups are contiguous class ranges
  (0-4 / 5-9 for two experts): a fixed choice, not tuned.

Data: the bundled 8x8 digits (1797 images, no download), a stratified 80/20 split fixed by the seed.
Metric: test accuracy. Teacher and students output logits, the router outputs class probabilities;
both are read by argmax. ``tiny=True`` trains for a few epochs (tests).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import Config, EdgesmithError, cache_dir, load_or_train
from edgesmith.common.checks import is_int
from edgesmith.models.papers.scaling.distill import GATINGS, ScaledOut, class_groups, fit, group_logits, kd_loss, mlp

N_IN, N_CLASSES = 64, 10


@dataclass(frozen=True)
class ScalingConfig(Config):
    """Sizes and training settings shared by every role (the teacher's part is in every cache key)."""

    teacher_width: int = 256
    teacher_epochs: int = 60
    width: int = 32
    epochs: int = 60
    lr: float = 3e-3
    temperature: float = 4.0
    alpha: float = 0.9
    n_experts: int = 2
    router_width: int = 16
    gating: str = "soft"

    def validate(self) -> None:
        for name in ("teacher_width", "width", "router_width", "teacher_epochs", "epochs"):
            v = getattr(self, name)
            if not is_int(v, 1):
                self._fail(name, f"is {v!r}", "use a positive integer.")
        if not self.lr > 0:
            self._fail("lr", f"is {self.lr!r}", "use a positive learning rate such as 3e-3.")
        if not self.temperature > 0:
            self._fail("temperature", f"is {self.temperature!r}", "use a positive temperature (4 is usual).")
        if not 0.0 <= self.alpha <= 1.0:
            self._fail("alpha", f"is {self.alpha!r}", "use a weight between 0 (labels only) and 1 (teacher only).")
        if not is_int(self.n_experts, 2, N_CLASSES):
            self._fail("n_experts", f"is {self.n_experts!r}", f"use 2 to {N_CLASSES} specialists.")
        if self.gating not in GATINGS:
            self._fail("gating", f"is {self.gating!r}", f"use one of: {', '.join(GATINGS)}.")

    @classmethod
    def tiny(cls, **kw) -> "ScalingConfig":
        return cls(teacher_width=64, teacher_epochs=4, epochs=4, **kw)


def load_split(seed: int):
    """Stratified 80/20 split of the digits, pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


def _cached(path, make, train):
    """``make()`` with its weights from the cache entry ``path``, or trained in place by ``train`` and cached."""
    module = make()
    load_or_train(module, path, lambda: train(module))
    return module.eval()


@register_producer
class ScalingStudent(Producer):
    """Teacher / distilled student / router over specialists on digits (see the module docstring)."""

    name = "scaling-student"
    tiny_options = {"tiny": True}
    description = "digits teacher MLP, KD students at any width, router over specialists (scaling up/down/out)"
    metric = Metric("accuracy", higher_is_better=True, unit="fraction")

    def __init__(self, seed: int = 0, tiny: bool = False, width: int | None = None, router: bool = False,
                 teacher: bool = False, gating: str = "soft", n_experts: int = 2):
        super().__init__(seed=seed)
        if router and teacher:
            raise EdgesmithError("scaling-student got both router=true and teacher=true.",
                                 "ask for one role: the teacher, a student (default) or the router.")
        self.tiny = bool(tiny)
        self.router = bool(router)
        self.teacher = bool(teacher)
        kw = dict(gating=gating, n_experts=n_experts)
        if width is not None:
            kw["width"] = width
        self.cfg = ScalingConfig.tiny(**kw) if tiny else ScalingConfig(**kw)

    @property
    def role(self) -> str:
        return "teacher" if self.teacher else "router" if self.router else "student"

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (N_IN,)

    def split(self):
        if not hasattr(self, "split_"):
            self.split_ = load_split(self.seed)
        return self.split_

    def _path(self, role: str):
        c = asdict(self.cfg)
        if role == "teacher":  # the teacher does not depend on the student settings
            c = {k: c[k] for k in ("teacher_width", "teacher_epochs", "lr")}
        elif role == "student":
            c = {k: v for k, v in c.items() if k not in ("n_experts", "router_width", "gating")}
        key = repr((self.name, role, self.seed, c, torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{role}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def _train_tensors(self):
        x_tr, _, y_tr, _ = self.split()
        return torch.from_numpy(x_tr), torch.from_numpy(y_tr)

    def build_teacher(self) -> torch.nn.Module:
        c = self.cfg
        x, y = self._train_tensors()
        return _cached(self._path("teacher"), lambda: mlp(N_IN, (c.teacher_width,) * 2, N_CLASSES),
                       lambda m: fit(m, x, y, lambda out, idx, yb: torch.nn.functional.cross_entropy(out, yb),
                                     epochs=c.teacher_epochs, lr=c.lr, seed=self.seed))

    def build(self) -> "ScalingStudent":
        c = self.cfg
        torch.manual_seed(self.seed)  # fresh modules' initial weights depend only on the seed
        teacher = self.build_teacher()
        if self.teacher:
            self.module_ = teacher
            return self
        x, y = self._train_tensors()
        with torch.no_grad():
            t_logits = teacher(x)
        kd = lambda tl: (lambda out, idx, yb: kd_loss(out, tl[idx], yb, c.temperature, c.alpha))  # noqa: E731
        if not self.router:
            torch.manual_seed(self.seed + 1)
            self.module_ = _cached(self._path("student"), lambda: mlp(N_IN, (c.width,) * 2, N_CLASSES),
                                   lambda m: fit(m, x, y, kd(t_logits), epochs=c.epochs, lr=c.lr, seed=self.seed + 1))
            return self
        groups = class_groups(N_CLASSES, c.n_experts)

        def make():
            torch.manual_seed(self.seed + 2)
            return ScaledOut(mlp(N_IN, (c.router_width,), c.n_experts),
                             [mlp(N_IN, (c.width,) * 2, len(g)) for g in groups], c.gating)

        def train(m: ScaledOut):
            group_of = torch.zeros(N_CLASSES, dtype=torch.long)
            for k, g in enumerate(groups):
                group_of[g] = k
            fit(m.router, x, group_of[y], kd(group_logits(t_logits, groups)), epochs=c.epochs, lr=c.lr,
                seed=self.seed + 2)
            for k, (g, expert) in enumerate(zip(groups, m.experts)):
                keep = torch.nonzero(group_of[y] == k).flatten()
                fit(expert, x[keep], y[keep] - g[0], kd(t_logits[keep][:, g]), epochs=c.epochs, lr=c.lr,
                    seed=self.seed + 3 + k)

        self.module_ = _cached(self._path("router"), make, train)
        return self

    def n_params(self) -> int:
        return int(sum(p.numel() for p in self.module.parameters()))

    def calibration_data(self, n: int = 128) -> np.ndarray:
        x_tr = self.split()[0]
        idx = np.random.default_rng(self.seed).permutation(len(x_tr))[: min(n, len(x_tr))]
        return np.ascontiguousarray(x_tr[np.sort(idx)])

    def test_data(self) -> tuple[np.ndarray, np.ndarray]:
        _, x_te, _, y_te = self.split()
        return x_te, y_te

    def evaluate(self, predict) -> Evaluation:
        x_te, y_te = self.test_data()
        out = np.asarray(predict(self.check_input(x_te)))
        acc = float(np.mean(np.argmax(out, axis=-1) == y_te))
        return Evaluation(self.metric, acc, len(y_te), extra={"role": self.role, "width": self.cfg.width})

    def report_notes(self) -> list[str]:
        if not self.router:
            return [f"{self.role} MLP on sklearn digits; the output is class logits."]
        return [f"router over {self.cfg.n_experts} specialists with {self.cfg.gating} gating inside the graph; the "
                "output is class probabilities (gate x specialist softmax).",
                "every specialist is computed in the exported graph (ONNX has no data-dependent skip here), so hard "
                "gating masks the others' outputs but does not cut latency."]
