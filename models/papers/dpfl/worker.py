"""DP federated learning over torchrun processes: process r hosts clients r, r + W, r + 2W, ...

Each round every process adds up the messages of its participating clients and one all-reduce
(float32, byte-counted) gives the server's sum; every process then applies the same mu^2-SGD update,
so the model copies stay equal. ``{"runs": [DPFLConfig.to_dict(), ...]}`` runs several settings in
one launch; rank 0 returns per run the final model, its excess training loss over the non-private
optimum, test accuracy, the noise calibration and the privacy actually spent.
"""
from __future__ import annotations

import torch

from edgesmith.models.papers.distributed.comm import Comm, run_worker
from edgesmith.models.papers.dpfl.config import DPFLConfig
from edgesmith.models.papers.dpfl.data import FedData
from edgesmith.models.papers.dpfl.fl import Client, run_rounds
from edgesmith.models.papers.dpfl.logreg import accuracy, augment, loss, optimum
from edgesmith.models.papers.dpfl import privacy


def data_of(cfg: DPFLConfig) -> FedData:
    return FedData(cfg.clients, cfg.per_client, cfg.dim, cfg.data_seed)


def calibration(cfg: DPFLConfig) -> dict:
    """sigma for the method, and the (epsilon, delta) the resulting noise actually gives."""
    rho = privacy.eps_to_zcdp(cfg.epsilon, cfg.delta)
    delta_l2 = privacy.sensitivity(cfg.clip, cfg.batch)
    if cfg.method == "nonprivate":
        return {"sigma": 0.0, "sensitivity": delta_l2, "rho": None, "epsilon_spent": None}
    if cfg.method == "fresh":
        sigma = privacy.sigma_fresh(delta_l2, rho)
        rho_spent = delta_l2 ** 2 / (2 * sigma ** 2)
    else:
        sigma = privacy.sigma_cancel(delta_l2, rho, cfg.cycles, cfg.schedule)
        rho_spent = privacy.rho_cancel(delta_l2, [privacy.noise_std(sigma, k, cfg.schedule)
                                                  for k in range(1, cfg.cycles + 1)])
    return {"sigma": sigma, "sensitivity": delta_l2, "rho": rho_spent,
            "epsilon_spent": privacy.zcdp_to_eps(rho_spent, cfg.delta)}


def run_one(cfg: DPFLConfig, comm: Comm, reference: dict) -> dict:
    data = data_of(cfg)
    cal = calibration(cfg)
    clients = {i: Client(i, *data.client(i), cfg, cal["sigma"]) for i in range(cfg.clients) if i % comm.world == comm.rank}
    start = comm.bytes_sent
    x = run_rounds(cfg, clients, lambda t: comm.all_reduce_sum(t.to(torch.float32)).to(torch.float64))
    xa, y = reference["xa"], reference["y"]
    train_loss = loss(x, xa, y)
    return {"config": cfg.to_dict(), **cal, "rounds": cfg.rounds, "theta": x.tolist(),
            "train_loss": train_loss, "excess_loss": train_loss - reference["loss"],
            "test_accuracy": accuracy(x, reference["xa_test"], reference["y_test"]),
            "bytes_sent_per_worker": comm.bytes_sent - start}


def main(config: dict, comm: Comm) -> dict:
    torch.set_num_threads(1)
    runs = [DPFLConfig.from_dict(c) for c in config["runs"]]
    refs: dict = {}
    out = []
    for cfg in runs:
        key = (cfg.clients, cfg.per_client, cfg.dim, cfg.data_seed)
        if key not in refs:
            data = data_of(cfg)
            x_tr, y_tr = data.train()
            x_te, y_te = data.test_set()
            xa, yt = augment(x_tr), torch.from_numpy(y_tr)
            theta, best = optimum(xa, yt)
            refs[key] = {"xa": xa, "y": yt, "loss": best, "theta": theta, "norm": float(theta.norm()),
                         "xa_test": augment(x_te), "y_test": torch.from_numpy(y_te)}
        out.append(run_one(cfg, comm, refs[key]))
    return {"runs": out, "optima": [{"key": list(k), "train_loss": r["loss"], "theta_norm": r["norm"],
                                     "test_accuracy": accuracy(r["theta"], r["xa_test"], r["y_test"])}
                                    for k, r in refs.items()]}


if __name__ == "__main__":
    run_worker(main)
