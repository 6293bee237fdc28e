"""FOUNDER's reward-free pipeline, end to end: offline data -> world model -> mapping -> temporal distance."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from edgesmith.models.papers.founder.config import FounderConfig
from edgesmith.models.papers.founder.env import GridWorld, collect_offline
from edgesmith.models.papers.founder.grounding import Mapping, TemporalDistance, train_distance, train_mapping
from edgesmith.models.papers.founder.world_model import RSSM, train_world_model


@dataclass
class OfflineData:
    positions: np.ndarray  # (n, T + 1, 2)
    actions: np.ndarray  # (n, T)
    emb: np.ndarray  # (n, T + 1, emb_dim): view B of every visited state, training noise

    def view_a(self, world: GridWorld) -> torch.Tensor:
        return torch.from_numpy(world.view_a(self.positions))


def offline_data(world: GridWorld, cfg: FounderConfig, seed: int) -> OfflineData:
    rng = np.random.default_rng(seed)
    pos, act = collect_offline(world, cfg.n_traj, cfg.traj_len, rng)
    return OfflineData(pos, act, world.view_b(pos, cfg.emb_dim, cfg.noise, rng))


def make_parts(world: GridWorld, cfg: FounderConfig, seed: int):
    torch.manual_seed(seed)
    rssm = RSSM(world.n_cells, cfg.h_dim, cfg.s_dim, cfg.hidden)
    return rssm, Mapping(cfg.emb_dim, cfg.h_dim, cfg.s_dim, cfg.hidden), TemporalDistance(rssm.z_dim, cfg.hidden)


def train_parts(parts, world: GridWorld, data: OfflineData, cfg: FounderConfig, seed: int) -> dict:
    """Train the three parts in order (each on the previous one's fixed outputs), on one thread."""
    rssm, mapping, distance = parts
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic and friendly to a shared machine
    try:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        obs, act = data.view_a(world), torch.from_numpy(data.actions)
        hist = train_world_model(rssm, obs, act, steps=cfg.wm_steps, batch=cfg.batch, lr=cfg.lr,
                                 free_nats=cfg.free_nats, gen=gen)
        with torch.no_grad():
            h, (qm, ql), _, _ = rssm.observe(obs, act, sample=False)
            z = torch.cat([h, qm], dim=-1)
        flat = lambda t: t.reshape(-1, t.shape[-1])  # noqa: E731
        train_mapping(mapping, flat(torch.from_numpy(data.emb)), flat(h), flat(qm), flat(ql), steps=cfg.map_steps,
                      batch=cfg.td_batch, lr=cfg.lr, gen=gen)
        train_distance(distance, z, steps=cfg.td_steps, batch=cfg.td_batch, lr=cfg.lr, neg_frac=cfg.neg_frac,
                       rng=np.random.default_rng(seed + 1))
    finally:
        torch.set_num_threads(threads)
    return {"wm_final_recon": hist[-1]["recon"], "wm_final_kl": hist[-1]["kl"]}
