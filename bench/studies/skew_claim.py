"""Expressivity of the generalised skew spectrum on all 1044 seven-node graphs of the networkx atlas.

    .venv/bin/python -m edgesmith.bench.studies.skew_claim --out runs/skew-claim [--force] [--quick]

For k = 2, 3, 4 (k = 3 is Kondor and Borgwardt's skew spectrum; 2 the power spectrum; 4 the next
k-correlation) and for the orbit-function generalisation (a node attribute as a second function on
S_n, each factor of the correlation being the edge or the node function; here the attribute is
derived from the graph: each node's degree, or its number of triangles): the number of distinct
spectra (counts rounded to 6 decimals) against the 1044 isomorphism classes, the time per graph, the
number of invariants, and the largest change of a spectrum when the graph's nodes are relabelled by
random permutations (several per graph). Each row lists its largest collision group (indices into
the list of seven-node atlas graphs).

Consistency with the definition: on all graphs with 4 and 5 nodes the k-correlation is also
evaluated literally on S_n (``correlation_bruteforce``); the number of distinct correlation functions
must equal the number of distinct count vectors (``bruteforce_distinct`` rows).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from edgesmith.bench.studies.claim_io import claim_command, refuse_existing, save_png, write_claim
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.skew.producer import atlas_graphs, permute_graphs
from edgesmith.models.papers.skew.spectrum import correlation_bruteforce, skew_spectrum, spectrum_patterns

DECIMALS = 6


def distinct_rows(x: np.ndarray, decimals: int = DECIMALS) -> int:
    """How many different rows ``x`` has once rounded (spectra equal up to float tolerance)."""
    return int(len(np.unique(np.round(x.reshape(len(x), -1), decimals), axis=0)))


def collision_groups(x: np.ndarray, decimals: int = DECIMALS) -> list[list[int]]:
    """Groups (of row indices) that share a spectrum, largest first."""
    _, inv = np.unique(np.round(x, decimals), axis=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(np.ravel(inv)):
        groups.setdefault(int(g), []).append(i)
    return sorted((g for g in groups.values() if len(g) > 1), key=len, reverse=True)


ORBIT_FUNCTIONS = ("degree", "triangles")


def node_function(a: np.ndarray, orbit: str | None) -> np.ndarray | None:
    """A node attribute derived from the graph (so still an isomorphism invariant input):
    the degree, or the number of triangles through the node, (A^3)_ii / 2."""
    if orbit is None:
        return None
    if orbit == "degree":
        return a.sum(2)
    return np.einsum("zij,zjk,zki->zi", a, a, a) / 2.0


def spectra(a: np.ndarray, k: int, orbit: str | None) -> np.ndarray:
    return skew_spectrum(a, k, node_function(a, orbit))


def run(ks, n_perms: int, seed: int, limit: int | None, bruteforce: bool, progress: bool = True) -> dict:
    import networkx as nx

    gs = atlas_graphs(7)[:limit] if limit else atlas_graphs(7)
    a = np.stack([nx.to_numpy_array(g, nodelist=range(7)) for g in gs])
    rng = np.random.default_rng(seed)
    permuted = [permute_graphs(a, rng) for _ in range(n_perms)]
    settings = [(k, None) for k in ks] + [(k, o) for o in ORBIT_FUNCTIONS for k in ks if k <= 3]
    rows = []
    for k, orbit in tqdm(settings, desc="spectra", disable=not progress):
        t0 = time.perf_counter()
        s = spectra(a, k, orbit)
        seconds = time.perf_counter() - t0
        dev = max(float(np.max(np.abs(spectra(p, k, orbit) - s))) for p in permuted) if n_perms else None
        groups = collision_groups(s)
        rows.append({"k": k, "orbit_function": orbit or "none", "n_invariants": int(s.shape[1]),
                     "patterns": [p.name() for p in spectrum_patterns(k, 7, orbit is not None, True)],
                     "distinct_spectra": distinct_rows(s), "isomorphism_classes": len(gs),
                     "graphs_in_collisions": int(sum(len(g) for g in groups)),
                     "largest_collision_group_seven_node_indices": groups[0] if groups else [],
                     "seconds_per_graph": seconds / len(gs), "max_abs_change_under_relabelling": dev})
    check = _bruteforce_rows(ks) if bruteforce else []
    return {"rows": rows, "bruteforce_distinct": check, "n_graphs": len(gs), "n_permutations": n_perms,
            "seed": seed, "decimals": DECIMALS}


def _bruteforce_rows(ks) -> list[dict]:
    """On all 4- and 5-node graphs: distinct literal S_n correlations vs distinct count vectors."""
    import networkx as nx

    out = []
    for n, kk in ((4, [k for k in ks if k <= 4]), (5, [k for k in ks if k <= 3])):
        a = np.stack([nx.to_numpy_array(g, nodelist=range(n)) for g in atlas_graphs(n)])
        for k in kk:
            corr = np.stack([correlation_bruteforce(m, k).ravel() for m in a])
            out.append({"n": n, "k": k, "graphs": len(a), "distinct_literal_correlations": distinct_rows(corr),
                        "distinct_count_vectors": distinct_rows(skew_spectrum(a, k))})
    return out


def to_markdown(res: dict) -> str:
    lines = [f"Skew spectra of the {res['n_graphs']} seven-node atlas graphs ({res['n_graphs']} isomorphism "
             f"classes); relabelling check over {res['n_permutations']} random permutations per graph, seed "
             f"{res['seed']}.", "",
             "| k | orbit function | invariants | distinct spectra | graphs in collisions | ms / graph | max change under relabelling |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        dev = "n/a" if r["max_abs_change_under_relabelling"] is None else f"{r['max_abs_change_under_relabelling']:.1e}"
        lines.append(f"| {r['k']} | {r['orbit_function']} | {r['n_invariants']} | {r['distinct_spectra']} / "
                     f"{r['isomorphism_classes']} | {r['graphs_in_collisions']} | {1e3 * r['seconds_per_graph']:.3f} | {dev} |")
    if res["bruteforce_distinct"]:
        lines += ["", "Literal k-correlation on S_n (all graphs with n nodes) vs the count vectors:", "",
                  "| n | k | graphs | distinct literal correlations | distinct count vectors |", "|---|---|---|---|---|"]
        lines += [f"| {r['n']} | {r['k']} | {r['graphs']} | {r['distinct_literal_correlations']} | "
                  f"{r['distinct_count_vectors']} |" for r in res["bruteforce_distinct"]]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for orbit, marker in (("none", "o-"), ("degree", "s--"), ("triangles", "^--")):
        rs = [r for r in res["rows"] if r["orbit_function"] == orbit]
        if not rs:
            continue
        label = "edges only" if orbit == "none" else f"edges + {orbit} orbit function"
        axes[0].plot([r["k"] for r in rs], [r["distinct_spectra"] for r in rs], marker, label=label)
        axes[1].plot([r["k"] for r in rs], [1e3 * r["seconds_per_graph"] for r in rs], marker, label=label)
    axes[0].axhline(res["n_graphs"], color="k", lw=1, ls=":", label="isomorphism classes")
    axes[0].set_ylabel("distinct spectra")
    axes[1].set_ylabel("ms per graph (numpy, one batch)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xticks(sorted({r["k"] for r in res["rows"]}))
        ax.set_xlabel("correlation order k")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Generalised skew spectrum on the 7-node graph atlas")
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/skew-claim")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="first 150 graphs, k = 2 and 3, no brute-force rows (seconds)")
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--perms", type=int, default=5, help="random relabellings per graph")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if any(k not in (2, 3, 4) for k in a.ks):
        raise EdgesmithError(f"--ks {a.ks} contains an unsupported order.", "use orders among 2, 3 and 4.")
    if a.perms < 0:
        raise EdgesmithError(f"--perms {a.perms} is negative.", "use 0 or more relabellings per graph.")
    out = Path(a.out)
    refuse_existing(out, a.force)
    ks = [k for k in a.ks if k <= 3] if a.quick else a.ks
    t0 = time.perf_counter()
    res = run(ks, a.perms, a.seed, 150 if a.quick else None, bruteforce=not a.quick)
    res.update(date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), quick=a.quick,
               wall_seconds=time.perf_counter() - t0,
               command=claim_command("edgesmith.bench.studies.skew_claim", argv))
    print(write_claim(out, a.force, res, to_markdown, lambda folder: plot(res, folder / "distinct_vs_k.png")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
