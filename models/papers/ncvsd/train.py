"""Noise conditional variational score distillation at MLP scale (after xypeng9903/ncvsd's training loop).

One iteration = one denoising-score-matching step on the fake denoiser (on generator samples),
then one VSD step on the generator:

    x = G(y, sigma),  y = x0 + sigma n,  t ~ exp(N(0.4, 2.0)),  x_t = x + t eps
    sigma_eff = (sigma^-2 + t^-2)^-1/2,  y_eff = sigma_eff^2 (y / sigma^2 + x_t / t^2)
    loss_G = w(t) e^-u || x - sg(x + D_teacher(y_eff, sigma_eff) - D_fake(x_t, t, y, sigma)) ||^2 + d u
    w(t) = (t^2 + sigma_data^2) / (t sigma_data)^2,  u = u(sigma) a learned log-variance

(y_eff, sigma_eff) is the posterior of x from two Gaussian observations (y at sigma, x_t at t), so
the teacher's denoiser at that point is the score of the noisy denoising posterior: the paper's key
identity. The gradient of loss_G w.r.t. x is 2 w e^-u (D_fake - D_teacher): it moves samples from
where the fake denoiser points (the generator's own distribution) toward the teacher's. The notes
write the stop-gradient target as x - (D_teacher - D_fake), which has the opposite sign; the public
code's ``(x - (s0 - s + x).detach())`` is the one used here.

Choices not fixed by the sources (stated here on purpose): the teacher here is a formula, so
"initialise from the teacher network" becomes ``init_steps`` of regression onto the teacher's
denoiser (``init_from_teacher``); the log-variance heads start from scratch; the fake denoiser then
gets ``warmup_fake_steps`` DSM-only steps,
Adam(0.9, 0.99) with a cosine decay to 10 % of the learning rate, and the deployed generator is an
exponential moving average of the trained one (the paper uses power-function EMA).
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from edgesmith.models.papers.ncvsd.config import NetConfig, TrainConfig
from edgesmith.models.papers.ncvsd.gmm import GaussianMixture, karras_schedule
from edgesmith.models.papers.ncvsd.nets import FakeDenoiser, Generator, LogVar


def lognormal(n: int, mean_std: tuple[float, float], gen: torch.Generator) -> torch.Tensor:
    """[n, 1] noise levels t = exp(mean + std * N(0, 1))."""
    return torch.exp(mean_std[0] + mean_std[1] * torch.randn(n, 1, generator=gen))


def sample_sigma(n: int, cfg: TrainConfig, gen: torch.Generator) -> torch.Tensor:
    """[n, 1] conditioning noise levels of y (see ``TrainConfig.sigma_sampler``)."""
    if cfg.sigma_sampler == "lognormal":
        return lognormal(n, cfg.sigma_lognormal, gen).clamp(cfg.sigma_min, cfg.sigma_max)
    levels = karras_schedule(1000, cfg.sigma_min, cfg.sigma_max).float()
    return levels[torch.randint(0, len(levels), (n,), generator=gen)].reshape(n, 1)


def effective(y: torch.Tensor, sigma: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor):
    """Combine y = x + sigma n and x_t = x + t eps into one observation: (y_eff, sigma_eff)."""
    sigma_eff = 1 / torch.sqrt(1 / sigma ** 2 + 1 / t ** 2)
    return sigma_eff ** 2 * (y / sigma ** 2 + x_t / t ** 2), sigma_eff


def edm_weight(t: torch.Tensor, sigma_data: float) -> torch.Tensor:
    return (t ** 2 + sigma_data ** 2) / (t * sigma_data) ** 2


def vsd_loss(x, logvar, y, sigma, t, eps, teacher: GaussianMixture, fake: FakeDenoiser, sigma_data: float):
    """Per-sample generator loss [B]; gradients reach only ``x`` and ``logvar`` (the rest is stop-gradient)."""
    with torch.no_grad():
        x_t = x + t * eps
        y_eff, sigma_eff = effective(y, sigma, x_t, t)
        s0 = teacher.denoise(y_eff, sigma_eff)
        s = fake(x_t, t, y, sigma)
    w = edm_weight(t, sigma_data)
    per_dim = w / torch.exp(logvar) * (x - (x + s0 - s).detach()) ** 2 + logvar
    return per_dim.sum(1)


def dsm_loss(fake: FakeDenoiser, logvar_head: LogVar, x, y, sigma, t, eps, sigma_data: float):
    """Per-sample denoising score matching loss [B] of the fake denoiser on generator samples ``x``."""
    d = fake(x + t * eps, t, y, sigma)
    logvar = logvar_head(t)
    return (edm_weight(t, sigma_data) / torch.exp(logvar) * (d - x) ** 2 + logvar).sum(1)


def init_from_teacher(g: Generator, fake: FakeDenoiser, teacher: GaussianMixture, cfg: TrainConfig,
                      gen: torch.Generator, gamma: float, sigma_data: float) -> None:
    """Regress both networks onto the teacher, as the paper initialises them from the teacher network.

    The generator learns D_teacher(y_hat, sigma_hat) of its own noised input (the teacher's denoiser
    at the generator's main input); the fake denoiser learns the unconditional D_teacher(x_t, t).
    """
    opt = torch.optim.Adam([*g.parameters(), *fake.parameters()], lr=cfg.lr_fake, betas=(0.9, 0.99))
    for _ in range(cfg.init_steps):
        x0 = teacher.sample(cfg.batch, gen)
        sigma = sample_sigma(cfg.batch, cfg, gen)
        y = x0 + sigma * torch.randn(x0.shape, generator=gen)
        z = torch.randn(x0.shape, generator=gen)
        sigma_hat = sigma * (1 + gamma)
        y_hat = y + z * sigma * math.sqrt((1 + gamma) ** 2 - 1)
        t = lognormal(cfg.batch, cfg.dsm_t, gen)
        x_t = x0 + t * torch.randn(x0.shape, generator=gen)
        with torch.no_grad():
            target_g, target_f = teacher.denoise(y_hat, sigma_hat), teacher.denoise(x_t, t)
        loss = (edm_weight(sigma_hat, sigma_data) * (g.generate(y, sigma, z) - target_g) ** 2).sum(1).mean() \
            + (edm_weight(t, sigma_data) * (fake(x_t, t, y, sigma) - target_f) ** 2).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def _lr(step: int, total: int, base: float) -> float:
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step / max(total, 1), 1.0))))


def train(teacher: GaussianMixture, net_cfg: NetConfig, cfg: TrainConfig, progress: bool = False
          ) -> tuple[Generator, dict]:
    """Distil ``teacher`` into a one-step generative denoiser; returns the EMA generator (eval mode) and a history."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    d, sd = teacher.dim, net_cfg.sigma_data
    g, u_g = Generator(d, net_cfg), LogVar(net_cfg.n_freqs)
    fake, u_f = FakeDenoiser(d, net_cfg), LogVar(net_cfg.n_freqs)
    # two time scales: the generator moves slower than the fake denoiser that must track it (the public
    # presets scale the generator's rate by 0.01); its log-variance head is a normaliser and moves fast
    opt_g = torch.optim.Adam([{"params": g.parameters(), "base": cfg.lr_generator},
                              {"params": u_g.parameters(), "base": cfg.lr_fake}], lr=cfg.lr_generator, betas=(0.9, 0.99))
    opt_f = torch.optim.Adam([{"params": [*fake.parameters(), *u_f.parameters()], "base": cfg.lr_fake}],
                             lr=cfg.lr_fake, betas=(0.9, 0.99))
    init_from_teacher(g, fake, teacher, cfg, gen, net_cfg.gamma, sd)
    ema = copy.deepcopy(g).requires_grad_(False)
    history: dict = {"step": [], "dsm": [], "vsd": []}
    total = cfg.warmup_fake_steps + cfg.steps
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="ncvsd", unit="step", leave=False)
    t0, dsm_acc, vsd_acc, n_acc = time.perf_counter(), 0.0, 0.0, 0
    for step in range(total):
        for grp in opt_f.param_groups:
            grp["lr"] = _lr(step, total, grp["base"])
        for _ in range(cfg.fake_steps):
            # fake denoiser: DSM on fresh generator samples
            x0 = teacher.sample(cfg.batch, gen)
            sigma = sample_sigma(cfg.batch, cfg, gen)
            y = x0 + sigma * torch.randn(x0.shape, generator=gen)
            with torch.no_grad():
                x = g.generate(y, sigma, torch.randn(x0.shape, generator=gen))
            loss_f = dsm_loss(fake, u_f, x, y, sigma, lognormal(cfg.batch, cfg.dsm_t, gen),
                              torch.randn(x.shape, generator=gen), sd).mean()
            opt_f.zero_grad(set_to_none=True)
            loss_f.backward()
            opt_f.step()
            dsm_acc += float(loss_f.detach()) / cfg.fake_steps
        if step >= cfg.warmup_fake_steps:
            # generator: VSD against the teacher's posterior denoiser
            gstep = step - cfg.warmup_fake_steps
            for grp in opt_g.param_groups:
                grp["lr"] = _lr(gstep, cfg.steps, grp["base"])
            x0 = teacher.sample(cfg.batch, gen)
            sigma = sample_sigma(cfg.batch, cfg, gen)
            y = x0 + sigma * torch.randn(x0.shape, generator=gen)
            x = g.generate(y, sigma, torch.randn(x0.shape, generator=gen))
            loss_g = vsd_loss(x, u_g(sigma), y, sigma, lognormal(cfg.batch, cfg.vsd_t, gen),
                              torch.randn(x.shape, generator=gen), teacher, fake, sd).mean()
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            vsd_acc += float(loss_g.detach())
            with torch.no_grad():
                for pe, p in zip(ema.parameters(), g.parameters()):
                    pe.lerp_(p, 1 - cfg.ema)
        n_acc += 1
        if (step + 1) % 100 == 0 or step + 1 == total:
            history["step"].append(step + 1)
            history["dsm"].append(dsm_acc / n_acc)
            history["vsd"].append(vsd_acc / n_acc if step >= cfg.warmup_fake_steps else float("nan"))
            dsm_acc, vsd_acc, n_acc = 0.0, 0.0, 0
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    history["seconds"] = time.perf_counter() - t0
    return ema.eval(), history


# --- sampling outside the graph ---------------------------------------------------------------------------------


def pack_inputs(y: np.ndarray, sigma, z: np.ndarray, sigma_data: float = 0.5) -> np.ndarray:
    """NumPy twin of ``Generator.pack``: [c_in(sigma) y, ln(sigma)/4, z] as float32."""
    y = np.asarray(y, dtype=np.float64)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64).reshape(-1, 1), (len(y), 1))
    c_in = 1 / np.sqrt(sigma ** 2 + sigma_data ** 2)
    return np.concatenate([c_in * y, np.log(sigma) / 4, z], axis=1).astype(np.float32)


def renoise_levels(steps: int, sigma_min: float = 0.002, sigma_max: float = 80.0, rho: float = 7.0) -> list[float]:
    """The t values of steps 2..n: Karras points at fractions k/n, k = 1..n-1.

    n = 2: t = 2.5; n = 4: t = 17.5, 2.5, 0.17.
    """
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return [float((hi + k / steps * (lo - hi)) ** rho) for k in range(1, steps)]


def sample(predict, dim: int, n: int, steps: int, seed: int, sigma_max: float = 80.0,
           sigma_data: float = 0.5) -> np.ndarray:
    """``n`` samples with ``steps`` generator calls; ``predict`` maps packed inputs to x (numpy -> numpy).

    Step 1: x = G(y, sigma_max) with y = sigma_max z (pure noise). Each further step re-noises x to
    x_t = x + t eps (t from ``renoise_levels``), merges (y, sigma_max) and (x_t, t) into
    (y_eff, sigma_eff) and denoises again: the public code's multi-step loop, with the schedule
    chosen here (the paper's per-step indices were not confirmed).
    """
    rng = np.random.default_rng(seed)
    y = sigma_max * rng.standard_normal((n, dim))
    x = np.asarray(predict(pack_inputs(y, sigma_max, rng.standard_normal((n, dim)), sigma_data)), dtype=np.float64)
    for t in renoise_levels(steps, sigma_max=sigma_max):
        x_t = x + t * rng.standard_normal((n, dim))
        s_eff = 1 / np.sqrt(1 / sigma_max ** 2 + 1 / t ** 2)
        y_eff = s_eff ** 2 * (y / sigma_max ** 2 + x_t / t ** 2)
        x = np.asarray(predict(pack_inputs(y_eff, s_eff, rng.standard_normal((n, dim)), sigma_data)), dtype=np.float64)
    return x.astype(np.float32)


# --- metric -------------------------------------------------------------------------------------------------------

MMD_BANDWIDTHS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


def mmd(a: np.ndarray, b: np.ndarray, bandwidths=MMD_BANDWIDTHS) -> float:
    """Maximum mean discrepancy with a sum of RBF kernels (biased V-statistic, so mmd(a, a) = 0).

    Bandwidths are for 2-D data and scale with sqrt(d / 2) so the same list fits other dimensions.
    Returns sqrt(max(MMD^2, 0)).
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = math.sqrt(a.shape[1] / 2)
    hs = np.asarray(bandwidths, dtype=np.float64) * scale

    def k_mean(p, q):
        d2 = np.maximum((p ** 2).sum(1)[:, None] + (q ** 2).sum(1)[None] - 2 * p @ q.T, 0.0)
        return float(np.mean([np.exp(-d2 / (2 * h * h)).mean() for h in hs]))

    return math.sqrt(max(k_mean(a, a) + k_mean(b, b) - 2 * k_mean(a, b), 0.0))
