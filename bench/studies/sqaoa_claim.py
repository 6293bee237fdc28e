"""SQAOA vs one-hot QAOA on correlation clustering: approximation ratio vs brute force, by n and depth p.

    .venv/bin/python -m edgesmith.bench.studies.sqaoa_claim --out runs/sqaoa-claim [--force] [--quick]

The paper's claim: SQAOA (one qubit per node, sub-problems, nucleus sampling) reaches better
approximation ratios than one-hot QAOA (n * k qubits), and ratios grow with depth. For each n,
``--graphs`` Erdos-Renyi graphs (edge probability 0.5, graph i with +1 edges at probability
(i + 1) / (G + 1): the authors sweep i / (G - 1), whose two ends, all-negative and all-positive,
a trivial clustering solves exactly, so we keep the interior) are solved by brute force, by SQAOA with per-level angles (Powell
from the all-negative warm start, ``--budget-per-param`` evaluations per angle) and by one-hot QAOA
with k = min(n, floor(max_qubits / n)) clusters where k >= 2; both with nucleus threshold ``--t``.
The one-hot row also lists OPT_k / OPT, the best any k-cluster answer can reach. A trivial
baseline (the better of "one cluster" and "all singletons") gives the floor.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from edgesmith.bench.studies.claim_io import refuse_existing, save_png, write_claim
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.sqaoa.graphs import agreement, brute_force, erdos_renyi_signed, set_partitions
from edgesmith.models.papers.sqaoa.onehot import solve_onehot
from edgesmith.models.papers.sqaoa.sqaoa import solve, warm_start


def opt_k(w: np.ndarray, k: int) -> float:
    """The best agreement with at most k clusters."""
    parts = set_partitions(len(w))
    parts = parts[parts.max(axis=1) < k]
    return max(agreement(w, p) for p in parts)


def trivial(w: np.ndarray) -> float:
    return max(agreement(w, np.zeros(len(w))), agreement(w, np.arange(len(w))))


def run(sizes, depths, n_graphs: int, t: float, budget_per_param: int, max_qubits: int, seed: int,
        progress: bool = True) -> dict:
    from threadpoolctl import threadpool_limits

    rows = []
    total = len(sizes) * len(depths) * n_graphs
    bar = tqdm(total=total, desc="sqaoa-claim", unit="graph-depth", disable=not progress)
    with threadpool_limits(1):
        for n in sizes:
            rng = np.random.default_rng([seed, n])
            graphs = [erdos_renyi_signed(n, 0.5, (i + 1) / (n_graphs + 1), rng) for i in range(n_graphs)]
            opts = np.array([brute_force(w)[0] for w in graphs])
            k = min(n, max_qubits // n)
            row = {"n": n, "sqaoa_qubits": n, "onehot_k": k if k >= 2 else None,
                   "onehot_qubits": n * k if k >= 2 else None, "optimum": opts.tolist(),
                   "trivial_ratio": (np.array([trivial(w) for w in graphs]) / opts).tolist(), "depths": {}}
            if k >= 2:
                row["opt_k_ratio"] = (np.array([opt_k(w, k) for w in graphs]) / opts).tolist()
            for p in depths:
                n_params = 3 * p * (n - 1)
                budget = budget_per_param * n_params
                t0 = time.perf_counter()
                x0 = warm_start(n, p, t, budget)
                sq = []
                for w in graphs:
                    sq.append(solve(w, p, t, budget=budget, x0=x0).expected_agreement)
                    bar.update(1)
                t_sq = time.perf_counter() - t0
                d = {"sqaoa_ratio": (np.array(sq) / opts).tolist(), "sqaoa_seconds": t_sq,
                     "sqaoa_budget": budget}
                if k >= 2:
                    t0 = time.perf_counter()
                    oh = [solve_onehot(w, k, p, t, budget=budget_per_param * 2 * p)[0] for w in graphs]
                    d["onehot_ratio"] = (np.array(oh) / opts).tolist()
                    d["onehot_seconds"] = time.perf_counter() - t0
                row["depths"][str(p)] = d
            rows.append(row)
    bar.close()
    return {"rows": rows}


def _ms(v) -> str:
    v = np.asarray(v, dtype=np.float64)
    return f"{v.mean():.3f} ± {v.std():.3f}"


def table_md(result: dict) -> str:
    s = result["settings"]
    depths = s["depths"]
    head = (["n", "trivial"] + [f"SQAOA p={p} (n qubits)" for p in depths] + ["one-hot k (qubits)", "OPT_k/OPT"]
            + [f"one-hot p={p}" for p in depths])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = [str(r["n"]), _ms(r["trivial_ratio"])]
        cells += [_ms(r["depths"][str(p)]["sqaoa_ratio"]) for p in depths]
        if r["onehot_k"]:
            cells += [f"{r['onehot_k']} ({r['onehot_qubits']})", _ms(r["opt_k_ratio"])]
            cells += [_ms(r["depths"][str(p)]["onehot_ratio"]) for p in depths]
        else:
            cells += [f"- (k >= 2 needs > {s['onehot_max_qubits']} qubits)", "-"] + ["-"] * len(depths)
        lines.append("| " + " | ".join(cells) + " |")
    notes = ["", *verdict(result), "",
        f"Approximation ratio = nucleus-expected agreement (t = {s['t']}) / brute-force optimum, mean ± std over "
        f"{s['graphs']} Erdos-Renyi graphs per n (edge prob. 0.5, +1 edges with prob. (i+1)/(G+1)); seed {s['seed']}.",
        f"SQAOA: per-level angles, Powell from the all-negative warm start, {s['budget_per_param']} evaluations per "
        "angle; one-hot QAOA: penalty QUBO, k = min(n, floor(max_qubits / n)) clusters, infeasible outcomes score 0.",
        f"Wall time {result['wall_s']:.0f} s.",
    ]
    return "\n".join(lines + notes) + "\n"


def verdict(result: dict) -> list[str]:
    """Computed statements of the two claims (SQAOA beats one-hot QAOA; ratios grow with p)."""
    depths = result["settings"]["depths"]
    mean = lambda r, p, key: float(np.mean(r["depths"][str(p)][key]))  # noqa: E731
    both = [(r, p) for r in result["rows"] if r["onehot_k"] for p in depths]
    wins = sum(mean(r, p, "sqaoa_ratio") > mean(r, p, "onehot_ratio") for r, p in both)
    grow = [r["n"] for r in result["rows"]
            if all(mean(r, a, "sqaoa_ratio") <= mean(r, b, "sqaoa_ratio") + 1e-9 for a, b in zip(depths, depths[1:]))]
    return [f"- SQAOA above one-hot QAOA in {wins} of {len(both)} (n, p) cells where both ran.",
            f"- SQAOA ratio non-decreasing in p for n in {grow} of {[r['n'] for r in result['rows']]}."]


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    depths = result["settings"]["depths"]
    ns = [r["n"] for r in result["rows"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, p in enumerate(depths):
        c = f"C{i}"
        sq = [np.mean(r["depths"][str(p)]["sqaoa_ratio"]) for r in result["rows"]]
        axes[0].plot(ns, sq, "o-", color=c, label=f"SQAOA p={p}")
        oh = [(r["n"], np.mean(r["depths"][str(p)]["onehot_ratio"])) for r in result["rows"] if r["onehot_k"]]
        if oh:
            axes[0].plot(*zip(*oh), "s--", color=c, label=f"one-hot QAOA p={p}")
    axes[0].plot(ns, [np.mean(r["trivial_ratio"]) for r in result["rows"]], "k:", label="trivial")
    axes[0].set_xlabel("nodes n")
    axes[0].set_ylabel("approximation ratio")
    axes[0].legend(fontsize=7)
    for r in result["rows"]:
        axes[1].plot(depths, [np.mean(r["depths"][str(p)]["sqaoa_ratio"]) for p in depths], "o-", label=f"SQAOA n={r['n']}")
    axes[1].set_xlabel("depth p")
    axes[1].set_ylabel("approximation ratio")
    axes[1].set_xticks(depths)
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(f"SQAOA vs one-hot QAOA, nucleus t={result['settings']['t']}")
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/sqaoa-claim")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="n = 4, 5; p = 1; 2 graphs; small one-hot (seconds)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 5, 6, 7, 8])
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--graphs", type=int, default=5)
    ap.add_argument("--t", type=float, default=0.1, help="nucleus threshold (the paper's 0.1)")
    ap.add_argument("--budget-per-param", type=int, default=20)
    ap.add_argument("--onehot-max-qubits", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.sizes, a.depths, a.graphs, a.onehot_max_qubits, a.budget_per_param = [4, 5], [1], 2, 10, 10
    if min(a.sizes) < 3 or max(a.sizes) > 10 or a.graphs < 1 or min(a.depths) < 1:
        raise EdgesmithError("sizes must lie in 3..10, depths >= 1 and graphs >= 1.", "fix --sizes/--depths/--graphs.")
    out = Path(a.out)
    refuse_existing(out, a.force)
    t0 = time.perf_counter()
    result = run(a.sizes, a.depths, a.graphs, a.t, a.budget_per_param, a.onehot_max_qubits, a.seed,
                 progress=not a.no_progress)
    result["settings"] = {"sizes": a.sizes, "depths": a.depths, "graphs": a.graphs, "t": a.t,
                          "budget_per_param": a.budget_per_param, "onehot_max_qubits": a.onehot_max_qubits,
                          "seed": a.seed, "p_edge": 0.5, "quick": a.quick}
    result["date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    result["wall_s"] = time.perf_counter() - t0
    print(write_claim(out, a.force, result, table_md, lambda folder: plot(result, folder / "sqaoa_claim.png")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
