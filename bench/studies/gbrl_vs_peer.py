"""Edgesmith's Numba GBT engine vs the ``gbrl`` 1.1.9 package (the peer), plus export parity and latency.

    .venv/bin/python -m edgesmith.bench.studies.gbrl_vs_peer [--quick] [--out results/gbrl_vs_peer.json]

Prints Markdown tables:
1. fit time per tree on identical X (n x 20) and gradients (n x 7), depth 4, 256 bins, for
   cosine / l2 x greedy / oblivious, one thread and all threads (each thread setting runs in its
   own process so OMP_NUM_THREADS / NUMBA_NUM_THREADS take effect), with the ratio gbrl / ours;
2. split parity: one tree fitted by both on a shared example (gbrl ``n_bins=255`` thresholds =
   our 256 bins), compared through predictions on the batch plus 2000 unseen points;
3. predict latency for 1000 trees at batch 1, 16, 4096: ours, gbrl, onnxruntime on our ONNX export,
   and our C export (float / int16 / int8 leaves), one thread;
4. export parity: max |export - engine| and the stated bound.
Needs ``gbrl`` (a benchmark dependency, never a test one). Timings are medians (and minima, the
least disturbed figure on a shared machine) of repeated calls in one process; treat them as noisy.
Our fitter uses threads only from 16384 rows up (``_PARALLEL_FIT_ROWS``), so for n <= 8192 the
"all threads" rows time the same one-thread code as the "1 thread" rows, while gbrl uses OpenMP.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

D, K, DEPTH = 20, 7, 4


def _times(fn, reps: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def _median_time(fn, reps: int, warmup: int = 1) -> float:
    return float(np.median(_times(fn, reps, warmup)))


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D)).astype(np.float32)
    G = rng.normal(size=(n, K)).astype(np.float32)
    G[:, 0] += 2 * (X[:, 1] > 0.3)
    G[:, 3] -= 1.5 * (X[:, 7] < -0.2)
    return X, G


def _gbrl_model(policy: str, score: str, n_bins: int = 256, lr: float = 1.0):
    from gbrl.models.gbt import GBTModel

    return GBTModel({"max_depth": DEPTH, "grow_policy": policy, "n_bins": n_bins, "min_data_in_leaf": 0, "par_th": 2},
                    D, K, {"algo": "SGD", "lr": lr, "start_idx": 0, "stop_idx": K},
                    {"split_score_func": score, "generator_type": "Quantile", "control_variates": False})


def _gbrl_predict(m, X):
    return np.asarray(m.learner.predict(X, requires_grad=False, tensor=False))


def child_fit(sizes: list[int], reps_ours: int, reps_gbrl: int) -> list[dict]:
    from edgesmith.models.gbrl import GBTEnsemble

    rows = []
    for n in sizes:
        X, G = _data(n)
        for policy in ("greedy", "oblivious"):
            for score in ("cosine", "l2"):
                ens = GBTEnsemble(D, K, max_depth=DEPTH, n_bins=256, grow_policy=policy, split_score=score)
                ours = _times(lambda: ens.fit_step(X, G), reps_ours, warmup=2)
                m = _gbrl_model(policy, score)
                peer = _times(lambda: m.step(X, G), reps_gbrl if n < 8192 else 1, warmup=1)
                rows.append({"n": n, "policy": policy, "score": score, "ours_ms": float(np.median(ours)) * 1e3,
                             "gbrl_ms": float(np.median(peer)) * 1e3, "ours_min_ms": min(ours) * 1e3,
                             "gbrl_min_ms": min(peer) * 1e3})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def fit_tables(sizes, reps_ours, reps_gbrl) -> dict:
    out = {}
    for label, threads in (("1 thread", "1"), ("all threads", str(os.cpu_count()))):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "NUMBA_NUM_THREADS": threads}
        cmd = [sys.executable, "-m", "edgesmith.bench.studies.gbrl_vs_peer", "--child-fit", json.dumps([sizes, reps_ours, reps_gbrl])]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        out[label] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def split_parity() -> list[dict]:
    from edgesmith.models.gbrl import GBTEnsemble

    X, G = _data(512, seed=1)
    probe = np.concatenate([X, np.random.default_rng(2).normal(size=(2000, D)).astype(np.float32)])
    rows = []
    for policy in ("greedy", "oblivious"):
        for score in ("cosine", "l2"):
            m = _gbrl_model(policy, score, n_bins=255)
            m.step(X, G)
            ens = GBTEnsemble(D, K, max_depth=DEPTH, n_bins=256, grow_policy=policy, split_score=score, lr=1.0).fit_step(X, G)
            a, b = _gbrl_predict(m, probe), ens.predict(probe)
            data = m.learner._cpp_model.get_ensemble_data()
            rows.append({"policy": policy, "score": score, "max_abs_diff_batch": float(np.abs(a - b)[: len(X)].max()),
                         "max_abs_diff_unseen": float(np.abs(a - b)[len(X):].max()),
                         "gbrl_leaves": int(len(np.asarray(data["depths"]))),
                         "gbrl_root_split": (int(np.asarray(data["feature_indices"])[0, 0]),
                                             float(np.asarray(data["feature_values"])[0, 0])),
                         "ours_root_split": (int(ens.features[0][0]), float(ens.thresholds[0][0]))})
    return rows


def predict_and_exports(n_trees: int, batches: list[int]) -> tuple[list[dict], list[dict]]:
    import numba

    from edgesmith.compress import Artifact, PassContext, run_passes
    from edgesmith.compress.export_trees import ExportTreeCConfig, ExportTreeOnnxConfig
    from edgesmith.models.gbrl import GBTEnsemble
    from edgesmith.runtimes import get_runtime

    numba.set_num_threads(1)
    X, G = _data(128, seed=3)
    rng = np.random.default_rng(4)
    ens = GBTEnsemble(D, K, max_depth=DEPTH, grow_policy="oblivious", lr=0.05)
    m = _gbrl_model("oblivious", "cosine", lr=0.05)
    for _ in range(n_trees):
        g = rng.normal(size=(128, K)).astype(np.float32) + G
        ens.fit_step(X, g)
        m.step(X, g)
    art = Artifact("trees", module=ens, meta={"input_shape": [D]})
    work = Path(tempfile.mkdtemp(prefix="gbrl_bench_"))
    onnx_art, _ = run_passes(art, [ExportTreeOnnxConfig()], PassContext(workdir=work / "onnx"))
    runners = {"ours (Numba)": lambda x: ens.predict(x), "gbrl 1.1.9": lambda x: _gbrl_predict(m, x)}
    ort = get_runtime("onnxruntime", threads=1).load(onnx_art)
    runners["onnxruntime (our ONNX)"] = lambda x: ort.run(x).outputs
    parity = []
    Xp = _data(4096, seed=5)[0]
    ref = ens.predict(Xp)
    parity.append({"export": "onnx", "max_abs_err": float(np.abs(ort.run(Xp).outputs - ref).max()), "bound": None,
                   "bytes": onnx_art.size_bytes()})
    parity.append({"export": "gbrl vs ours (same trees?)", "max_abs_err": float(np.abs(_gbrl_predict(m, Xp) - ref).max()),
                   "bound": None, "bytes": None})
    for leaves in ("float", "int16", "int8"):
        c_art, rep = run_passes(art, [ExportTreeCConfig(leaves=leaves)], PassContext(workdir=work / leaves))
        rt = get_runtime("c").load(c_art)
        runners[f"C export ({leaves})"] = (lambda r: (lambda x: r.run(x).outputs))(rt)
        parity.append({"export": f"c-{leaves}", "max_abs_err": float(np.abs(rt.run(Xp).outputs - ref).max()),
                       "bound": float(max(c_art.meta["c_error_bound"])), "bytes": rep[0].size_after_bytes})
    rows = []
    for b in batches:
        x = Xp[:b]
        reps = 300 if b == 1 else (100 if b <= 16 else 5)
        row = {"batch": b}
        for name, fn in runners.items():
            row[name] = _median_time(lambda: fn(x), reps, warmup=3) * 1e6
        rows.append(row)
    return rows, parity


def render(results: dict) -> str:
    out = []
    for label, rows in results["fit"].items():
        out += [f"\n### Fit time per tree, {label} (d={D}, k={K}, depth {DEPTH}, 256 bins)\n",
                "| n | growth | score | ours median (min) ms | gbrl 1.1.9 median (min) ms | gbrl / ours, medians | "
                "gbrl / ours, mins |", "|---:|---|---|---:|---:|---:|---:|"]
        out += [f"| {r['n']} | {r['policy']} | {r['score']} | {r['ours_ms']:.2f} ({r['ours_min_ms']:.2f}) | "
                f"{r['gbrl_ms']:.1f} ({r['gbrl_min_ms']:.1f}) | {r['gbrl_ms'] / r['ours_ms']:.0f}x | "
                f"{r['gbrl_min_ms'] / r['ours_min_ms']:.0f}x |" for r in rows]
    out += ["\n### Split parity with gbrl (one tree, n=512, same quantile thresholds)\n",
            "| growth | score | max abs diff on batch | on 2000 unseen | gbrl root split | ours root split |",
            "|---|---|---:|---:|---|---|"]
    out += [f"| {r['policy']} | {r['score']} | {r['max_abs_diff_batch']:.2e} | {r['max_abs_diff_unseen']:.2e} | "
            f"x{r['gbrl_root_split'][0]} > {r['gbrl_root_split'][1]:.6g} | x{r['ours_root_split'][0]} > "
            f"{r['ours_root_split'][1]:.6g} |" for r in results["split_parity"]]
    names = [k for k in results["predict"][0] if k != "batch"]
    out += [f"\n### Predict latency, {results['n_trees']} oblivious trees, depth {DEPTH}, k={K}, one thread (us per call)\n",
            "| batch | " + " | ".join(names) + " | gbrl / ours |", "|---:|" + "---:|" * (len(names) + 1)]
    out += [f"| {r['batch']} | " + " | ".join(f"{r[k]:.1f}" for k in names) +
            f" | {r['gbrl 1.1.9'] / r['ours (Numba)']:.1f}x |" for r in results["predict"]]
    out += ["\n### Export parity vs the engine (4096 inputs)\n", "| export | max abs error | stated bound | model bytes |",
            "|---|---:|---:|---:|"]
    for p in results["export_parity"]:
        bound = "" if p["bound"] is None else f"{p['bound']:.2e}"
        size = "" if p["bytes"] is None else str(p["bytes"])
        out.append(f"| {p['export']} | {p['max_abs_err']:.2e} | {bound} | {size} |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n in {512, 2048} only, fewer repetitions")
    ap.add_argument("--n-trees", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path("results/gbrl_vs_peer.json"))
    ap.add_argument("--skip-fit", action="store_true", help="reuse the fit tables already in --out")
    ap.add_argument("--child-fit", help=argparse.SUPPRESS)
    ap.add_argument("--child-predict", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_fit:
        print(json.dumps(child_fit(*json.loads(args.child_fit))))
        return
    if args.child_predict:
        print(json.dumps(predict_and_exports(args.child_predict, [1, 16, 4096])))
        return
    from edgesmith.common import write_json

    sizes = [512, 2048] if args.quick else [512, 2048, 8192]
    if args.skip_fit:
        results = {"fit": json.loads(args.out.read_text())["fit"]}
    else:
        results = {"fit": fit_tables(sizes, 5 if args.quick else 9, 1 if args.quick else 3)}
    results["split_parity"] = split_parity()
    # one thread for everyone: gbrl's OpenMP and our Numba both read these at start-up
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "edgesmith.bench.studies.gbrl_vs_peer", "--child-predict", str(args.n_trees)],
                         env=env, capture_output=True, text=True, check=True)
    results["predict"], results["export_parity"] = json.loads(res.stdout.strip().splitlines()[-1])
    results["n_trees"] = args.n_trees
    write_json(args.out, results)
    print(render(results))


if __name__ == "__main__":
    main()
