"""EF-Landing for distributed PCA, one worker per torchrun process (gloo on CPU, NCCL on GPUs).

Every rank holds the same X (identical start from the seed); rank r holds worker r's local
covariance. Per iteration each rank sends its compressed message through ``CompressedMean`` (error
feedback included) and applies the same landing step to its copy of X, so the copies stay equal.

    launch("edgesmith.models.papers.eflanding.worker", {"runs": [EFLandingConfig(...).to_dict(), ...]}, nproc=4)

returns, per run, a history of (iteration, floats sent per worker, optimality gap, feasibility) and the
final X. The optimality gap is f(polar(X)) - f* (X projected onto the manifold, so it is >= 0 and not
flattered by X^T X != I); the raw f(X) - f* is kept too.
"""
from __future__ import annotations

import torch

from edgesmith.models.papers.distributed.comm import Comm, CompressedMean, run_worker
from edgesmith.models.papers.distributed.compressors import make_compressor
from edgesmith.models.papers.eflanding.config import EFLandingConfig
from edgesmith.models.papers.eflanding.landing import feasibility, normal_term, polar, relative_gradient
from edgesmith.models.papers.eflanding.pca import PCAProblem, objective, optimum


def initial_point(cfg: EFLandingConfig) -> torch.Tensor:
    g = torch.Generator().manual_seed(cfg.seed + 7)
    x, _ = torch.linalg.qr(torch.randn(cfg.n, cfg.p, generator=g, dtype=torch.float64))
    return x


def problem_of(cfg: EFLandingConfig) -> PCAProblem:
    return PCAProblem(cfg.n, cfg.p, cfg.workers, cfg.samples_per_worker, cfg.seed)


def _split(x: torch.Tensor, sizes) -> list[torch.Tensor]:
    return list(torch.split(x, list(sizes), dim=1))


def landing_step(x: torch.Tensor, m: torch.Tensor, cfg: EFLandingConfig) -> torch.Tensor:
    """Apply the averaged message ``m`` (eta * gradient, or eta * field), block by block."""
    if cfg.message == "field":
        return x - m
    parts = [xb - relative_gradient(xb, mb) - cfg.eta * cfg.lam * normal_term(xb)
             for xb, mb in zip(_split(x, cfg.block_sizes()), _split(m, cfg.block_sizes()))]
    return torch.cat(parts, dim=1)


def local_message(x: torch.Tensor, a_local: torch.Tensor, cfg: EFLandingConfig) -> torch.Tensor:
    g = -a_local @ x
    if cfg.message == "field":
        parts = [relative_gradient(xb, gb) + cfg.lam * normal_term(xb)
                 for xb, gb in zip(_split(x, cfg.block_sizes()), _split(g, cfg.block_sizes()))]
        g = torch.cat(parts, dim=1)
    return cfg.eta * g


def run_one(cfg: EFLandingConfig, comm: Comm) -> dict:
    if cfg.workers != comm.world:
        raise ValueError(f"config has {cfg.workers} workers but torchrun started {comm.world} processes")
    prob = problem_of(cfg)
    a_local = prob.local_covariance(comm.rank)
    a_global = sum(prob.local_covariance(i) for i in range(cfg.workers)) / cfg.workers
    f_star = optimum(a_global, cfg.p)
    mean = CompressedMean(comm, make_compressor(cfg.compressor), ef_mode=cfg.ef_mode, seed=cfg.seed)
    x = initial_point(cfg)
    start_bytes = comm.bytes_sent
    hist = {"iteration": [], "floats_sent_per_worker": [], "gap": [], "gap_raw": [], "feasibility": []}

    def log(t):
        hist["iteration"].append(t)
        hist["floats_sent_per_worker"].append((comm.bytes_sent - start_bytes) / 4.0)
        hist["gap"].append(objective(a_global, polar(x)) - f_star)
        hist["gap_raw"].append(objective(a_global, x) - f_star)
        hist["feasibility"].append(feasibility(x))

    log(0)
    for t in range(1, cfg.iters + 1):
        m = mean("x", local_message(x, a_local, cfg).to(torch.float32)).to(torch.float64)
        x = landing_step(x, m, cfg)
        if t % cfg.log_every == 0 or t == cfg.iters:
            log(t)
    return {"config": cfg.to_dict(), "history": hist, "x": x.tolist(), "f_star": f_star,
            "bytes_sent_per_worker": comm.bytes_sent - start_bytes}


def main(config: dict, comm: Comm) -> dict:
    torch.set_num_threads(1)
    return {"runs": [run_one(EFLandingConfig.from_dict(c), comm) for c in config["runs"]]}


if __name__ == "__main__":
    run_worker(main)
