"""A small RSSM world model (DreamerV3-style state z = (h, s)) trained on view A, without a reward head.

h_t = GRU(h_{t-1}, [s_{t-1}, a_{t-1}]) is deterministic; s_t is a diagonal Gaussian (8 values by
default): the prior p(s_t | h_t) and the posterior q(s_t | h_t, o_t). The loss is the decoder's
-ln p(o_t | h_t, s_t) (a categorical over the 49 cells, since view A is a one-hot) plus the KL of
posterior and prior with DreamerV3's balancing (0.8 on the prior side, 0.2 on the posterior side)
and free nats. Gaussian rather than DreamerV3's 32x32 categorical latents: at this size a Gaussian
is enough and keeps the imagination rollout a plain reparameterised sample. The features used
downstream are z = [h, mean of s] (means, not samples, so the mapping and distance targets are
deterministic for an observation sequence).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from edgesmith.models.papers.founder.env import N_ACTIONS


def gaussian_kl(mu_q, logstd_q, mu_p, logstd_p) -> torch.Tensor:
    """KL(N(mu_q, e^2logstd_q) || N(mu_p, e^2logstd_p)) summed over the last dimension."""
    var_q, var_p = torch.exp(2 * logstd_q), torch.exp(2 * logstd_p)
    return (logstd_p - logstd_q + (var_q + (mu_q - mu_p) ** 2) / (2 * var_p) - 0.5).sum(-1)


class RSSM(nn.Module):
    def __init__(self, obs_dim: int, h_dim: int, s_dim: int, hidden: int):
        super().__init__()
        self.h_dim, self.s_dim = h_dim, s_dim
        self.encoder = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ELU())
        self.gru = nn.GRUCell(s_dim + N_ACTIONS, h_dim)
        self.prior_net = nn.Sequential(nn.Linear(h_dim, hidden), nn.ELU(), nn.Linear(hidden, 2 * s_dim))
        self.post_net = nn.Sequential(nn.Linear(h_dim + hidden, hidden), nn.ELU(), nn.Linear(hidden, 2 * s_dim))
        self.decoder = nn.Sequential(nn.Linear(h_dim + s_dim, hidden), nn.ELU(), nn.Linear(hidden, obs_dim))

    @property
    def z_dim(self) -> int:
        return self.h_dim + self.s_dim

    @staticmethod
    def _split(stats):
        mu, logstd = stats.chunk(2, dim=-1)
        return mu, logstd.clamp(-5.0, 2.0)

    def prior(self, h):
        return self._split(self.prior_net(h))

    def posterior(self, h, obs):
        return self._split(self.post_net(torch.cat([h, self.encoder(obs)], dim=-1)))

    def transition(self, h, s, action):
        return self.gru(torch.cat([s, F.one_hot(action, N_ACTIONS).to(s.dtype)], dim=-1), h)

    def observe(self, obs: torch.Tensor, actions: torch.Tensor, sample: bool = True):
        """Filter a batch of sequences: obs (B, T+1, obs_dim), actions (B, T).

        Returns h (B, T+1, h_dim), posterior and prior (mu, logstd) each (B, T+1, s_dim), and the s used.
        The step before the first has h = 0, s = 0 and no action (a zero vector).
        """
        b, steps = obs.shape[0], obs.shape[1]
        h = obs.new_zeros(b, self.h_dim)
        s = obs.new_zeros(b, self.s_dim)
        hs, post_mu, post_ls, pri_mu, pri_ls, ss = [], [], [], [], [], []
        for t in range(steps):
            if t > 0:
                h = self.transition(h, s, actions[:, t - 1])
            pm, pl = self.prior(h)
            qm, ql = self.posterior(h, obs[:, t])
            s = qm + torch.exp(ql) * torch.randn_like(qm) if sample else qm
            hs.append(h), post_mu.append(qm), post_ls.append(ql), pri_mu.append(pm), pri_ls.append(pl), ss.append(s)
        st = lambda xs: torch.stack(xs, dim=1)  # noqa: E731
        return st(hs), (st(post_mu), st(post_ls)), (st(pri_mu), st(pri_ls)), st(ss)

    def loss(self, obs, actions, free_nats: float) -> tuple[torch.Tensor, dict]:
        h, (qm, ql), (pm, pl), s = self.observe(obs, actions)
        logits = self.decoder(torch.cat([h, s], dim=-1))
        recon = F.cross_entropy(logits.flatten(0, 1), obs.flatten(0, 1).argmax(-1))
        kl_prior = gaussian_kl(qm.detach(), ql.detach(), pm, pl).mean()
        kl_post = gaussian_kl(qm, ql, pm.detach(), pl.detach()).mean()
        kl = 0.8 * torch.clamp(kl_prior, min=free_nats) + 0.2 * torch.clamp(kl_post, min=free_nats)
        return recon + kl, {"recon": float(recon.detach()), "kl": float(kl_prior.detach())}

    @torch.no_grad()
    def features(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """z = [h, posterior mean of s] along each sequence, (B, T+1, z_dim), filtered with means."""
        h, (qm, _), _, _ = self.observe(obs, actions, sample=False)
        return torch.cat([h, qm], dim=-1)

    @torch.no_grad()
    def imagine_step(self, z: torch.Tensor, action: torch.Tensor, sample: bool = True) -> torch.Tensor:
        """One prior step from features z = [h, s]: the next [h', s'] with s' from p(s' | h')."""
        h, s = z[:, : self.h_dim], z[:, self.h_dim:]
        h = self.transition(h, s, action)
        pm, pl = self.prior(h)
        s = pm + torch.exp(pl) * torch.randn_like(pm) if sample else pm
        return torch.cat([h, s], dim=-1)

    @torch.no_grad()
    def filter_step(self, z: torch.Tensor | None, action: torch.Tensor | None, obs: torch.Tensor) -> torch.Tensor:
        """One posterior step in the real environment (z None: the first observation)."""
        if z is None:
            h = obs.new_zeros(obs.shape[0], self.h_dim)
        else:
            h = self.transition(z[:, : self.h_dim], z[:, self.h_dim:], action)
        qm, _ = self.posterior(h, obs)
        return torch.cat([h, qm], dim=-1)


def train_world_model(model: RSSM, obs: torch.Tensor, actions: torch.Tensor, *, steps: int, batch: int, lr: float,
                      free_nats: float, gen: torch.Generator) -> list[dict]:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(obs), (batch,), generator=gen)
        loss, info = model.loss(obs[idx], actions[idx], free_nats)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 100.0)
        opt.step()
        history.append(info)
    model.eval()
    return history
