"""The ``ncvsd`` producer: a one-step generative denoiser distilled from a Gaussian-mixture teacher.

Input: one packed row per sample, ``[c_in(sigma) y, ln(sigma)/4, z]`` (width 2 d + 1, see
``models.papers.ncvsd.nets``). Output: the generated x (width d). Metric: MMD (sum of RBF kernels) between
one-step samples (y = 80 z) and fresh teacher samples, lower is better; the 2- and 4-step MMD, the
noise floor (two independent teacher sample sets) and the teacher's own Heun sampler are in
``Evaluation.extra``. ``tiny=True`` trains for a few seconds (tests only).
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.common import EdgesmithError, cache_dir, module_cached
from edgesmith.models.papers.ncvsd.config import GMMConfig, NetConfig, TrainConfig
from edgesmith.models.papers.ncvsd.gmm import GaussianMixture
from edgesmith.models.papers.ncvsd.nets import Generator
from edgesmith.models.papers.ncvsd.train import mmd, pack_inputs, sample, sample_sigma, train

EVAL_STEPS = (1, 2, 4)
SIGMA_MAX = 80.0


@register_producer
class NcvsdProducer(Producer):
    name = "ncvsd"
    tiny_options = {"tiny": True}
    description = "NCVSD generative denoiser (MLP) distilled from a closed-form Gaussian-mixture teacher"
    metric = Metric("mmd_1step", higher_is_better=False, unit="")

    def __init__(self, seed: int = 0, tiny: bool = False, dim: int = 2, steps: int | None = None,
                 n_eval: int | None = None):
        super().__init__(seed=seed)
        self.tiny = tiny
        self.gmm_cfg = GMMConfig(dim=dim)
        self.net_cfg = NetConfig(hidden=32, depth=2) if tiny else NetConfig()
        self.train_cfg = (TrainConfig(steps=steps if steps is not None else 100, init_steps=20, warmup_fake_steps=20,
                                      batch=128, seed=seed) if tiny else
                          TrainConfig(**({} if steps is None else {"steps": steps}), seed=seed))
        self.n_eval = int(n_eval if n_eval is not None else (400 if tiny else 2000))
        if self.n_eval < 10:
            raise EdgesmithError(f"n_eval is {self.n_eval}; the MMD needs more samples.", "use n_eval >= 10 (default 2000).")

    @property
    def teacher(self) -> GaussianMixture:
        return GaussianMixture.from_config(self.gmm_cfg)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (2 * self.gmm_cfg.dim + 1,)

    def _cache_path(self):
        key = repr((self.name, self.gmm_cfg.to_dict(), self.net_cfg.to_dict(), self.train_cfg.to_dict(),
                    torch.__version__))
        return cache_dir() / "models" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    def build(self, progress: bool = False) -> "NcvsdProducer":
        def make():
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # deterministic and polite on a shared machine
            try:
                model, self.history_ = train(self.teacher, self.net_cfg, self.train_cfg, progress=progress)
            finally:
                torch.set_num_threads(threads)
            return model

        self.module_ = module_cached(self._cache_path(), lambda: Generator(self.gmm_cfg.dim, self.net_cfg), make)[0]
        return self

    def calibration_data(self, n: int = 128) -> np.ndarray:
        """Generator inputs from the training stream: half one-step inputs (sigma = 80), half training-like
        inputs (y = x0 + sigma n, sigma from the training sampler), so multi-step inputs are covered too."""
        gen = torch.Generator().manual_seed(10_000 + self.seed)
        d = self.gmm_cfg.dim
        n_one = (n + 1) // 2
        x0 = self.teacher.sample(n - n_one, gen)
        sigma = sample_sigma(n - n_one, self.train_cfg, gen)
        y = torch.cat([SIGMA_MAX * torch.randn(n_one, d, generator=gen), x0 + sigma * torch.randn(x0.shape, generator=gen)])
        s = torch.cat([torch.full((n_one, 1), SIGMA_MAX), sigma])
        z = torch.randn(n, d, generator=gen)
        return pack_inputs(y.numpy(), s.numpy(), z.numpy(), self.net_cfg.sigma_data)

    def reference_samples(self, which: int = 0) -> np.ndarray:
        """Fresh teacher samples for evaluation (``which`` picks an independent set; none is the training stream)."""
        gen = torch.Generator().manual_seed(2**31 - 1 - 7919 * which - self.seed)
        return self.teacher.sample(self.n_eval, gen).numpy()

    def generate(self, predict, steps: int) -> np.ndarray:
        """Samples of the deployed generator ``predict`` with ``steps`` calls (fixed evaluation noise)."""
        return sample(predict, self.gmm_cfg.dim, self.n_eval, steps, seed=20_000 + self.seed,
                      sigma_max=SIGMA_MAX, sigma_data=self.net_cfg.sigma_data)

    def evaluate(self, predict) -> Evaluation:
        ref = self.reference_samples(0)
        extra = {}
        for steps in EVAL_STEPS:
            x = self.generate(predict, steps)
            if not np.all(np.isfinite(x)):
                raise EdgesmithError(f"the generator produced non-finite samples at {steps} step(s).",
                                     "check the exported model or its quantization.")
            extra[f"mmd_{steps}step"] = mmd(x, ref)
        extra["mmd_noise_floor"] = mmd(self.reference_samples(1), ref)
        extra["bandwidths"] = "0.05, 0.1, 0.2, 0.5, 1, 2 (x sqrt(d/2))"
        return Evaluation(self.metric, extra["mmd_1step"], self.n_eval, extra=extra)

    def report_notes(self) -> list[str]:
        return [
            "The exported graph is one generator call on the packed input [c_in(sigma) y, ln(sigma)/4, z]; drawing "
            "y = 80 z and the injected noise z, and the re-noise/denoise loop of multi-step sampling, run outside "
            "the graph in the producer's evaluation.",
            "The metric is the MMD of one-step samples against fresh teacher samples (lower is better); the 2- and "
            "4-step MMD in extra call the same exported generator 2 and 4 times, and mmd_noise_floor is the MMD "
            "between two independent teacher sample sets.",
        ]
