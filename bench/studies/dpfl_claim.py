"""DP federated learning claim: with partial participation, noise cancellation gives lower excess loss
than fresh-noise DP at the same (epsilon, delta).

    .venv/bin/python -m edgesmith.bench.studies.dpfl_claim --out runs/dpfl-claim [--force] [--quick]

Logistic regression on data made here (40 clients x 250 samples, 32 features, heterogeneous client
means), mu^2-SGD, one pass over every client's data, m of 40 clients per round for several m,
(1, 1e-5)-DP per sample, seeds 0-2. Methods: non-private (reference), fresh noise, noise
cancellation (noise std growing as sqrt(participations), and constant). Excess loss = training loss
of the output minus the non-private optimum's. One torchrun launch (4 gloo processes hosting 10
clients each) runs everything. Writes table.json, table.md, claim.png.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

from edgesmith.common import atomic_path
from edgesmith.models.papers.distributed.launch import launch
from edgesmith.models.papers.dpfl.config import DPFLConfig

METHODS = (("non-private", "nonprivate", "growing"), ("fresh noise", "fresh", "growing"),
           ("noise cancellation (growing sigma)", "cancel", "growing"),
           ("noise cancellation (constant sigma)", "cancel", "constant"))


def run(ms, seeds, epsilon, quick: bool) -> tuple[list[dict], dict]:
    base = dict(clients=8, per_client=40) if quick else {}
    cfgs = [DPFLConfig(m=m, method=meth, schedule=sch, seed=s, epsilon=epsilon, **base)
            for m in ms for _, meth, sch in METHODS for s in seeds]
    res = launch("edgesmith.models.papers.dpfl.worker", {"runs": [c.to_dict() for c in cfgs]}, nproc=2 if quick else 4,
                 timeout_s=1800)
    runs = res.result["runs"]
    rows = []
    for m in ms:
        for label, meth, sch in METHODS:
            rs = [r for r in runs if r["config"]["m"] == m and r["config"]["method"] == meth
                  and r["config"]["schedule"] == sch]
            ex = np.array([r["excess_loss"] for r in rs])
            acc = np.array([r["test_accuracy"] for r in rs])
            rows.append({"m": m, "method": label, "excess_loss_mean": float(ex.mean()), "excess_loss_std": float(ex.std()),
                         "test_accuracy_mean": float(acc.mean()), "sigma": rs[0]["sigma"],
                         "epsilon_spent": rs[0]["epsilon_spent"], "rounds": rs[0]["rounds"],
                         "per_seed_excess_loss": ex.tolist(), "bytes_sent_per_worker": rs[0]["bytes_sent_per_worker"]})
    return rows, {"launch": res.to_dict(), "optima": res.result["optima"]}


def markdown(rows, settings) -> str:
    lines = [f"DP federated logistic regression: {settings['clients']} clients, ({settings['epsilon']}, "
             f"{settings['delta']:g})-DP per sample, seeds {settings['seeds']}, {settings['processes']} torchrun "
             f"processes ({settings['backend']})", "",
             "| m per round | method | rounds | sigma | epsilon spent | excess loss (mean +- std) | test accuracy |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = f"{r['epsilon_spent']:.3f}" if r["epsilon_spent"] is not None else "-"
        lines.append(f"| {r['m']} | {r['method']} | {r['rounds']} | {r['sigma']:.3g} | {eps} | "
                     f"{r['excess_loss_mean']:.4f} +- {r['excess_loss_std']:.4f} | {r['test_accuracy_mean']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(rows, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, _, _ in METHODS:
        rs = [r for r in rows if r["method"] == label]
        ax.errorbar([r["m"] for r in rs], [r["excess_loss_mean"] for r in rs], yerr=[r["excess_loss_std"] for r in rs],
                    marker="o", capsize=3, label=label)
    ax.set_xlabel("clients per round m")
    ax.set_ylabel("excess training loss")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("DP-FL with partial participation, same (epsilon, delta)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="8 clients, 2 processes, one seed (a smoke run)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    ms, seeds = ((4,), (0,)) if args.quick else ((5, 10, 20), tuple(range(args.seeds)))
    out = Path(args.out)
    with atomic_path(out, force=args.force) as tmp:
        tmp.mkdir(parents=True)
        rows, info = run(ms, seeds, args.epsilon, args.quick)
        cfg = DPFLConfig(m=ms[0], **(dict(clients=8, per_client=40) if args.quick else {}))
        settings = {"clients": cfg.clients, "per_client": cfg.per_client, "dim": cfg.dim, "batch": cfg.batch,
                    "lr": cfg.lr, "clip": cfg.clip, "radius": cfg.radius, "epsilon": args.epsilon, "delta": cfg.delta,
                    "ms": list(ms), "seeds": list(seeds), "processes": info["launch"]["processes"],
                    "backend": info["launch"]["backend"], "quick": args.quick}
        md = markdown(rows, settings)
        wins = [m for m in ms if next(r for r in rows if r["m"] == m and r["method"].startswith("noise cancellation (g"))
                ["excess_loss_mean"] < next(r for r in rows if r["m"] == m and r["method"] == "fresh noise")["excess_loss_mean"]]
        verdict = (f"noise cancellation beats fresh noise at m in {wins} of {list(ms)}"
                   if wins else "NOT reproduced: fresh noise was as good or better at every m")
        md += f"\n{verdict}.\n"
        table = {"claim": "noise cancellation < fresh-noise excess loss at equal privacy", "settings": settings,
                 "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "rows": rows,
                 "optima": info["optima"], "launch": info["launch"], "verdict": verdict}
        (tmp / "table.json").write_text(json.dumps(table, indent=1) + "\n")
        (tmp / "table.md").write_text(md)
        plot(rows, tmp / "claim.png")
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
