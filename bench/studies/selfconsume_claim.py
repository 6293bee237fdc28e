"""Self-consuming loop under benign, noisy (phi) and adversarial (label-flip) curation: E[true reward] by round.

    .venv/bin/python -m edgesmith.bench.studies.selfconsume_claim --out runs/selfconsume-claim [--force] [--quick]

The paper's toy claim: with curation by user preferences the retrained generator's expected reward
rises; adversarial curation drives it down (or stalls it); mixing in real data stabilises the loop.
Conditions: benign (clean pairs, phi = 0); noisy curation with an adversarial share phi in
{0.1, 0.3} (P = (1 - phi) softmax(r_hat) + phi softmax(-r_hat)); label-flip attacks on 20% of the
preference pairs (random, largest true-reward gap, first-order influence); each retrained on curated
data alone and mixed with 20% real data, over several seeds (mean ± std).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from edgesmith.bench.studies.claim_io import refuse_existing, save_png, write_claim
from edgesmith.models.papers.selfconsume.loop import LoopConfig, run_loop

CONDITIONS = {
    "benign": {},
    "phi=0.1": {"phi": 0.1},
    "phi=0.3": {"phi": 0.3},
    "flip-random 20%": {"attack": "random"},
    "flip-gap 20%": {"attack": "gap"},
    "flip-influence 20%": {"attack": "influence"},
}


def run(base: LoopConfig, conditions: list[str], real_fractions: list[float], seeds: list[int],
        progress: bool = True) -> list[dict]:
    import torch

    runs = []
    bar = tqdm(total=len(conditions) * len(real_fractions) * len(seeds), desc="selfconsume-claim", unit="loop",
               disable=not progress)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in conditions:
            for rf in real_fractions:
                cfg = replace(base, real_fraction=rf, **CONDITIONS[name])
                per_seed = []
                for s in seeds:
                    per_seed.append(run_loop(cfg, s))
                    bar.update(1)
                runs.append({"condition": name, "real_fraction": rf, "config": cfg.to_dict(),
                             "expected_reward": [r["expected_reward"] for r in per_seed],
                             "reward_model_accuracy": [r["reward_model_accuracy"] for r in per_seed]})
    finally:
        torch.set_num_threads(threads)
        bar.close()
    return runs


def table_md(result: dict) -> str:
    rounds = result["settings"]["rounds"]
    marks = sorted({0, min(5, rounds), min(10, rounds), rounds})
    head = ["condition", "real data"] + [f"E[r] round {m}" for m in marks] + ["BT pair accuracy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["runs"]:
        er = np.array(r["expected_reward"])
        acc = np.array(r["reward_model_accuracy"]).mean(axis=1)
        cells = [r["condition"], f"{r['real_fraction']:.0%}"]
        cells += [f"{er[:, m].mean():.3f} ± {er[:, m].std():.3f}" for m in marks]
        cells.append(f"{acc.mean():.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    s = result["settings"]
    lines += ["", *verdict(result)]
    lines += ["", f"E[r] = mean true reward -||x - c|| of the generator (GMM, EM) after each retraining round; "
              f"mean ± std over seeds {s['seeds']}; K = {s['k']} samples and pairs per round, {s['keep']:.0%} curated; "
              "round 0 is the generator fitted on real data. BT pair accuracy: the curating reward model's "
              "agreement with the true reward on its own (possibly attacked) round's pairs, averaged over rounds.",
              f"Wall time {result['wall_s']:.0f} s."]
    return "\n".join(lines) + "\n"


def verdict(result: dict) -> list[str]:
    """Computed statements of the claim: benign rises, adversarial ends lower, real data and stability."""
    out = []
    for rf in result["settings"]["real_fractions"]:
        runs = {r["condition"]: np.array(r["expected_reward"]).mean(axis=0) for r in result["runs"]
                if r["real_fraction"] == rf}
        if "benign" not in runs:
            continue
        b = runs["benign"]
        out.append(f"- {rf:.0%} real data: benign E[r] {b[0]:.3f} -> {b[-1]:.3f} "
                   f"({'rises' if b[-1] > b[0] else 'does not rise'}); final E[r] minus benign's: "
                   + ", ".join(f"{k} {v[-1] - b[-1]:+.3f} (peak-to-final drop {v.max() - v[-1]:.3f})"
                               for k, v in runs.items() if k != "benign"))
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rfs = result["settings"]["real_fractions"]
    fig, axes = plt.subplots(1, len(rfs), figsize=(5.5 * len(rfs), 4.2), squeeze=False, sharey=True)
    names = list(dict.fromkeys(r["condition"] for r in result["runs"]))
    for ax, rf in zip(axes[0], rfs):
        for i, name in enumerate(names):
            r = next(r for r in result["runs"] if r["condition"] == name and r["real_fraction"] == rf)
            er = np.array(r["expected_reward"])
            xs = np.arange(er.shape[1])
            ax.plot(xs, er.mean(axis=0), "-", color=f"C{i}", label=name)
            ax.fill_between(xs, er.mean(axis=0) - er.std(axis=0), er.mean(axis=0) + er.std(axis=0),
                            color=f"C{i}", alpha=0.15)
        ax.set_title("curated data only" if rf == 0 else f"{rf:.0%} real data mixed in")
        ax.set_xlabel("retraining round")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("E[true reward]")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/selfconsume-claim")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="2 rounds, 1 seed, small K, two conditions (seconds)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    ap.add_argument("--real-fractions", type=float, nargs="+", default=[0.0, 0.2])
    ap.add_argument("--k", type=int, default=LoopConfig.k)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    base = LoopConfig(rounds=a.rounds, k=a.k)
    if a.quick:
        base = LoopConfig(rounds=2, k=80, n_real=200, n_eval=200, reward_steps=10)
        a.seeds, a.conditions, a.real_fractions = [0], ["benign", "flip-gap 20%"], [0.0]
    out = Path(a.out)
    refuse_existing(out, a.force)
    t0 = time.perf_counter()
    runs = run(base, a.conditions, a.real_fractions, a.seeds, progress=not a.no_progress)
    result = {"settings": {"rounds": base.rounds, "k": base.k, "keep": base.keep, "budget": base.budget,
                           "seeds": a.seeds, "conditions": a.conditions, "real_fractions": a.real_fractions,
                           "quick": a.quick, "base_config": base.to_dict()},
              "runs": runs, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "wall_s": time.perf_counter() - t0}
    print(write_claim(out, a.force, result, table_md, lambda folder: plot(result, folder / "selfconsume_claim.png")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
