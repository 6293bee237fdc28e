"""RTN, GPTQ, GPTVQ and RWKVQuant on the reference models, with 95% intervals over calibration seeds.

    python -m edgesmith.bench.studies.rwkv_quant_seeds [--workers N] [--models rwkv7-ref] \
        [--out-dir docs/results/rwkv_quant_seeds] [--sweep-dir DIR]
    python -m edgesmith.bench.studies.rwkv_quant_seeds --join DIR_V6 DIR_V7 --out-dir OUT

(the second makes one table of sweep folders the first already ran, one per model, say, each with ``--models``;
each folder's ``sweep.json`` names the recipe it ran)

The reference's size is the recipe's ``model_options.size`` ("large" in the recipes below; without it the
shipped 2-layer x 128 pair, as in ``rwkv-quant-seeds-small.toml``); a table holds one size per model.

The cells are an ``edgesmith sweep`` (``bench/recipes/sweeps/rwkv-quant-seeds.toml``): the 6-layer x 512
reference models (``model_options.size = "large"``; train them first, see ``models/rwkv/train.py``), each
quantizer at 3 and 4 code bits (about 3.3 and 4.3 bits per weight), once per calibration seed (the seed draws
the 64 calibration windows from the training split; RTN reads none and runs once), all scored on the same
evaluation windows in onnxruntime on the step graph. Pass defaults throughout: SQ group 64, VQ d=2, the
token-shift vectors codebook-quantized, RWKVQuant at the paper's percentile (90).

Per model and bit width the script reports each method's perplexity and its increase over fp32 as the mean
over seeds with a 95% Student-t interval, and the goal of the issue: RWKVQuant's increase over the best
baseline's (the baseline with the lowest mean increase), as a ratio paired by seed (the same seed gives both
methods the same calibration windows) with its own interval. "met" needs the interval's upper end <= 0.75;
"met on the mean" only the mean. It also reads the excess kurtosis of every block linear of each model, so a
reader can see how far from uniform (-1.2) the weights are. Writes ``table_*.md``, ``results_*.json`` and
``dppl_vs_bpw_*.png``.

RWKVQuant's threshold percentile chosen on held-out text (``rwkv-quant-seeds-vqnorm-val.toml``): where a recipe
runs RWKVQuant at several percentiles for one model and bit width, the script first runs every cell except those
candidates' seeds other than ``CHOICE_SEED`` (0), picks the candidate with the lowest *validation* perplexity
there (``percentile_choices``; the recipe must set ``model_options.validation = true``), then runs only the chosen
one on the other seeds. Its row stands for RWKVQuant in the table and the goal; every candidate's validation and
evaluation perplexity at seed 0 is listed under the table.

Fidelity to the fp32 model as well (``kl_to_fp32``, from ``fidelity_of_cells``): these small byte-level models
lose so little perplexity at 4 bits that a quantizer's noise can lower it (a negative increase, and then no
ratio), so each quantized cell's saved checkpoint (the weights its step graph runs) is also scored by the mean
per-byte KL divergence KL(fp32 || quantized) of the next-byte distributions on the same evaluation windows, in
torch. It is never
negative; the table gives it per method with its interval, and RWKVQuant's KL over the best baseline's (by KL),
paired by seed, beside the perplexity goal (which stays the goal).

Why the perplexity increase is so noisy here (``nll_parity``): the fp32 model is not at the minimum of the
evaluation text's loss, so a weight error D changes the evaluation NLL by g.D (first order, either sign) plus
D'HD/2 (second order, a cost whatever the sign). At 4 bits the first-order term is as large as the whole
increase. Scoring the mirrored model too (every quantized parameter reflected through its fp32 value, w - D: an
evaluation device, not a quantized model) splits the measured increase exactly into its even part
(NLL(w+D) + NLL(w-D))/2 - NLL(w), the cost of the error's size, and its odd part (NLL(w+D) - NLL(w-D))/2, which
flips with the error's sign. The table gives the even part as a perplexity increase beside the measured one, and
RWKVQuant's even part over the best baseline's (by even part), paired by seed; the goal stays the measured one.

How much of a ranking is the evaluation text's (``--test-windows N``): the first-order term depends on the text, so
a ranking seen on 64 windows need not hold on others. With N > 0 every kept cell's checkpoint is also scored, in
torch, on N windows of the evaluation split past the ones the perplexity reads (``heldout_windows``: text that no
score or choice has read, up to 18x as much as the evaluation's), and the table repeats the increase and the goal
on it.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from edgesmith.bench.sweep import RECIPES
from edgesmith.bench.studies.rwkv_quant_table import DEFAULT_PERCENTILE, choose_percentile, vq_note, write_outputs
from edgesmith.bench.report.stats import interval
from edgesmith.common import EdgesmithError
from edgesmith.compress.rwkvquant.fidelity import mirrored, model_scores, reference_scores, split_parity, token_nll

RECIPE = RECIPES / "rwkv-quant-seeds.toml"
BASELINES = ("rtn", "gptq", "gptvq")
METHODS = (*BASELINES, "rwkvquant")
GOAL = 0.75  # RWKVQuant's perplexity increase at most this share of the best baseline's
CHOICE_SEED = 0  # the calibration seed on whose validation perplexity RWKVQuant's candidate percentiles compete


def reference_size(report: dict) -> str:
    """The size of the reference model a cell quantized (``model_options.size`` of its sweep spec, which
    ``with_spec`` copies into the report; the producer's default, "small", without one)."""
    return report.get("model_options", {}).get("size", "small")


def with_spec(report: dict, spec: dict | None) -> dict:
    """The deploy report of a sweep cell with the model options of its spec, which name the reference's size."""
    return {**report, "model_options": dict((spec or {}).get("model_options", {}))}


def _quant_cell(report: dict) -> dict:
    """The one quantized variant of a cell: method, bits, seed, perplexity, bpw and the quantizer's facts."""
    (res,) = [r for r in report["results"] if r["runtime"] == "onnxruntime"]
    (var,) = [v for v in report["variants"] if v["name"] == res["variant"]]
    if res["variant"] == "fp32":
        return {"method": "fp32", "seed": report["seed"], "ppl": res["evaluation"]["value"],
                "n_tokens": res["evaluation"]["n_samples"], "size_bytes": res["size_bytes"]}
    quant = var["pass_reports"][0]
    cfg = quant["config"]
    return {"method": cfg["kind"].removeprefix("rwkv-"), "bits": cfg["bits"], "seed": report["seed"],
            "ppl": res["evaluation"]["value"], "bpw": quant["bits_per_weight"], "seconds": quant["seconds"],
            "n_sq": quant["extra"]["n_sq"], "n_vq": quant["extra"]["n_vq"], "size_bytes": quant["size_after_bytes"],
            "percentile": cfg["sq_percentile"], "vq_scale_block": cfg.get("vq_scale_block", 0),
            "proxy": cfg.get("proxy", "paper"),
            "val_ppl": res["evaluation"].get("extra", {}).get("validation_perplexity"),
            "kl": report.get("kl_to_fp32"), "parity": report.get("nll_parity"), "test": report.get("test_nll")}


def _seed_pairs(rq: dict, best: dict, field: str) -> list[tuple[float, float]]:
    """(RWKVQuant's, the best baseline's) ``field`` per shared calibration seed; a seedless baseline (one value)
    pairs with every seed."""
    theirs = best[field]
    ref = dict.fromkeys(rq["seeds"], theirs[0]) if len(theirs) == 1 else dict(zip(best["seeds"], theirs))
    return [(v, ref[s]) for s, v in zip(rq["seeds"], rq[field]) if s in ref]


def _no_shared_seed() -> EdgesmithError:
    return EdgesmithError("RWKVQuant and the best baseline share no calibration seed.", "run both on the same seeds.")


def _paired_ratio(rq: dict, best: dict, field: str = "dppl") -> dict:
    """RWKVQuant's Δppl against the best baseline's, per seed (a seedless baseline pairs with every seed): the
    difference always, the ratio (the goal's measure) only when the baseline loses perplexity on every seed.
    ``field`` "test_dppl": the same on the held-out test text."""
    pairs = _seed_pairs(rq, best, field)
    if not pairs:
        raise _no_shared_seed()
    out = {"baseline": best["method"], "diff": interval([d - b for d, b in pairs])}
    if any(b <= 0 for _, b in pairs):
        return {**out, "status": "n/a",
                "why": f"{best['method']} loses no perplexity on some seed, so the ratio is undefined"}
    ratios = [d / b for d, b in pairs]
    r = interval(ratios)
    status = "met" if r["mean"] + r["ci95"] <= GOAL else "met on the mean" if r["mean"] <= GOAL else "not met"
    return {**out, **r, "per_seed": ratios, "status": status}


def _field_ratio(rq: dict, best: dict, field: str = "kl") -> dict:
    """RWKVQuant's ``field`` (KL to fp32, or the even part of the increase) over the best baseline's (lowest mean
    of that field), paired by seed like ``_paired_ratio``."""
    ratios = [k / b for k, b in _seed_pairs(rq, best, field) if b > 0]
    if not ratios:
        raise _no_shared_seed()
    return {"baseline": best["method"], **interval(ratios), "per_seed": ratios}


KL_FILE = "kl_to_fp32.json"  # beside a cell's deploy: a cell's folder is keyed by its content, so this never goes stale
PARITY_FILE = "nll_parity.json"
FIDELITY = {"kl_to_fp32": KL_FILE, "nll_parity": PARITY_FILE}  # report field -> the file it is kept in


def test_file(n_windows: int) -> str:
    """The file a cell keeps its NLL on ``n_windows`` windows of fresh test text in (``fidelity_of_cells``)."""
    return f"test_nll_{n_windows}.json"


def fidelity_of_cells(sweep_dir: Path, keys: list[str], reports: list[dict], log=print, test_windows: int = 0) -> None:
    """Add ``kl_to_fp32`` (``token_kl`` of the fp32 reference and the checkpoint the cell saved) and
    ``nll_parity`` (``nll_parity`` of that checkpoint) to every quantized cell's report, both on the producer's
    evaluation windows; fp32 cells are left as they are. With ``test_windows`` N > 0, also ``test_nll``: the
    checkpoint's and the reference's mean NLL on N windows of the evaluation split that no score or choice has
    read (``heldout_windows``), a larger test of the evaluation's ranking. Each figure is kept in the cell's
    folder and read back without a model next time. What is missing is computed from one load of the checkpoint
    (its evaluation NLL and KL from the same logits, one pass of its mirror, one over the test text), against the
    reference's figures computed once per model."""
    import functools
    import json

    from edgesmith.common import atomic_path
    from edgesmith.compress.rwkvquant import load_quantized
    from edgesmith.models import get_producer

    files = {**FIDELITY, **({"test_nll": test_file(test_windows)} if test_windows else {})}
    refs: dict = {}
    sizes = _sizes(reports)

    def reference(model):  # the reference's figures, each computed at most once and only when a cell needs it
        if model not in refs:
            producer = get_producer(model, size=sizes[model]).build()
            ref, windows = producer.module_.eval(), producer.eval_windows()
            test = functools.cache(lambda: producer.heldout_windows(test_windows))
            refs[model] = (ref, windows, functools.cache(lambda: reference_scores(ref, windows)), test,
                           functools.cache(lambda: token_nll(ref, test())))
        return refs[model]

    for key, report in zip(keys, reports):
        cell = Path(sweep_dir) / "cells" / key
        found = sorted((cell / "deploy" / "artifacts").glob("*/model.quantized.pth"))
        if not found:
            continue
        if len(found) > 1:
            raise EdgesmithError(f"cell {key} holds {len(found)} quantized checkpoints.", "run one variant per cell.")
        missing = [f for f, file in files.items() if not (cell / file).exists()]
        for field in set(files) - set(missing):
            report[field] = json.loads((cell / files[field]).read_text())
        if not missing:
            continue
        ref, windows, base, test, test_base = reference(report["model"])
        q = load_quantized(found[0]).eval()
        scores = functools.cache(lambda: model_scores(q, windows, base()["logprobs"] if "kl_to_fp32" in missing else None))
        figures = {"kl_to_fp32": lambda: {"kl_nats_per_byte": scores()["kl"], "windows": list(windows.shape)},
                   "nll_parity": lambda: {**split_parity(base()["nll"], scores()["nll"], token_nll(mirrored(ref, q), windows)),
                                          "windows": list(windows.shape)},
                   "test_nll": lambda: {"nll_fp32": test_base(), "nll_quantized": token_nll(q, test()),
                                        "windows": list(test().shape), "after_evaluation_windows": len(windows)}}
        for field in missing:
            report[field] = {**figures[field](), "checkpoint": found[0].name}
            with atomic_path(cell / files[field], force=True) as tmp:
                tmp.write_text(json.dumps(report[field]))
        if log:
            log(f"[fidelity] {report['model']} seed {report['seed']} {found[0].parent.name}: "
                + ", ".join(f"{k} {v:.6f}" for f in missing for k, v in report[f].items() if isinstance(v, float)))
    for report in reports:
        if isinstance(report.get("kl_to_fp32"), dict):
            report["kl_to_fp32"] = report["kl_to_fp32"]["kl_nats_per_byte"]


def _parity_columns(parities: list[dict]) -> dict:
    """Per seed, in perplexity units on torch's own fp32 perplexity: the increase torch measures, its even part
    exp(nll + even) - exp(nll) and the rest (odd part), with intervals."""
    ppl = [math.exp(p["nll_fp32"]) for p in parities]
    measured = [math.exp(p["nll_quantized"]) - f for p, f in zip(parities, ppl)]
    even = [math.exp(p["nll_fp32"] + p["even"]) - f for p, f in zip(parities, ppl)]
    odd = [m - e for m, e in zip(measured, even)]
    return {"torch_dppl": measured, "even": even, "odd": odd, "torch_dppl_stats": interval(measured),
            "even_stats": interval(even), "odd_stats": interval(odd)}


def _candidate(spec: dict) -> tuple[tuple[str, int], float] | None:
    """((model, bits), percentile) of a recipe cell that runs RWKVQuant; None for any other cell."""
    opts = spec.get("options", {})
    if opts.get("methods") != ["rwkvquant"]:
        return None
    return (spec["model"], opts["bits"][0]), float(opts.get("sq_percentile", DEFAULT_PERCENTILE))


def percentile_choices(reports: list[dict]) -> tuple[list[int], dict]:
    """Where the cells run RWKVQuant at several threshold percentiles for one model and bit width, the candidate
    with the lowest validation perplexity at ``CHOICE_SEED`` (``choose_percentile``: evaluation scores are never
    looked at) stands for RWKVQuant on every seed, and the other candidates' cells are set aside. Returns (the
    indices in ``reports`` of the cells the table is made of, {(model, bits): {"chosen": percentile,
    "candidates": [...]}})."""
    groups: dict = {}
    for i, report in enumerate(reports):
        q = _quant_cell(report)
        if q["method"] == "rwkvquant":
            groups.setdefault((report["model"], q["bits"]), []).append((i, q))
    drop, choices = set(), {}
    for (model, bits), cells in sorted(groups.items()):
        percentiles = {q["percentile"] for _, q in cells}
        if len(percentiles) < 2:
            continue
        at_seed = [q for _, q in cells if q["seed"] == CHOICE_SEED]
        missing = percentiles - {q["percentile"] for q in at_seed}
        if missing:
            raise EdgesmithError(f"{model} RWKVQuant {bits}-bit: percentile(s) {sorted(missing)} have no seed-"
                                 f"{CHOICE_SEED} cell to be chosen on.", f"run every candidate at seed {CHOICE_SEED}.")
        if any(q["val_ppl"] is None for q in at_seed):
            raise EdgesmithError(f"{model} RWKVQuant {bits}-bit: the candidates have no validation perplexity to "
                                 "choose a percentile on.", "set model_options.validation = true in the recipe.")
        best = choose_percentile(at_seed)
        choices[(model, bits)] = {"chosen": best["percentile"], "candidates": [
            {k: q[k] for k in ("percentile", "val_ppl", "ppl", "n_vq", "n_sq")}
            for q in sorted(at_seed, key=lambda q: q["percentile"])]}
        drop |= {i for i, q in cells if q["percentile"] != best["percentile"]}
    return [i for i in range(len(reports)) if i not in drop], choices


def _sizes(reports: list[dict]) -> dict[str, str]:
    """Each model's reference size; one per model, or the cells would compare different models."""
    sizes: dict[str, set] = {}
    for r in reports:
        sizes.setdefault(r["model"], set()).add(reference_size(r))
    for model, found in sizes.items():
        if len(found) > 1:
            raise EdgesmithError(f"{model}: cells of reference sizes {', '.join(sorted(found))} in one table.",
                                 "make one table per size (a sweep folder per recipe).")
    return {m: found.pop() for m, found in sizes.items()}


def seed_table(reports: list[dict]) -> list[dict]:
    """Per model: fp32, then per bit width every method's per-seed perplexities with mean and 95% interval of the
    increase over fp32, and the goal ratio. Each model needs exactly one fp32 cell. RWKVQuant at several
    percentiles: its row is the one ``percentile_choices`` picks on validation text, with the candidates beside it."""
    kept, choices = percentile_choices(reports)
    reports = [reports[i] for i in kept]
    sizes = _sizes(reports)
    models: dict = {}
    for report in reports:
        models.setdefault(report["model"], []).append(_quant_cell(report))
    results = []
    for name, cells in models.items():
        fps = [c for c in cells if c["method"] == "fp32"]
        if len(fps) != 1:
            raise EdgesmithError(f"{name}: {len(fps)} fp32 cells, not 1.", "the recipe lists fp32 once per model.")
        fp = fps[0]["ppl"]
        groups: dict = {}
        for c in cells:
            if c["method"] != "fp32":
                groups.setdefault((c["bits"], c["method"]), []).append(c)
        rows, goals = [], []
        for bits in sorted({b for b, _ in groups}):
            by_method = {}
            for method in METHODS:
                cs = sorted(groups.get((bits, method), []), key=lambda c: c["seed"])
                if len({c["seed"] for c in cs}) < len(cs):
                    raise EdgesmithError(f"{name} {method} {bits}-bit: a seed appears twice.", "run each seed once.")
                if not cs:
                    continue
                dppl = [c["ppl"] - fp for c in cs]
                row = {"method": method, "bits": bits, "seeds": [c["seed"] for c in cs],
                       "ppl": [c["ppl"] for c in cs], "dppl": dppl, "ppl_stats": interval([c["ppl"] for c in cs]),
                       "dppl_stats": interval(dppl), "bpw": float(np.mean([c["bpw"] for c in cs])),
                       "seconds": float(np.mean([c["seconds"] for c in cs])),
                       "n_sq": [c["n_sq"] for c in cs], "n_vq": [c["n_vq"] for c in cs],
                       "size_bytes": int(np.mean([c["size_bytes"] for c in cs])),
                       "vq_scale_block": cs[0]["vq_scale_block"], "proxy": cs[0]["proxy"]}
                if method == "rwkvquant" and (name, bits) in choices:
                    row["percentile_choice"] = choices[(name, bits)]
                if all(c["kl"] is not None for c in cs):
                    row.update(kl=[c["kl"] for c in cs], kl_stats=interval([c["kl"] for c in cs]))
                if all(c["parity"] is not None for c in cs):
                    row.update(_parity_columns([c["parity"] for c in cs]))
                if all(c["test"] is not None for c in cs):
                    test = [math.exp(c["test"]["nll_quantized"]) - math.exp(c["test"]["nll_fp32"]) for c in cs]
                    row.update(test_dppl=test, test_dppl_stats=interval(test), test_windows=cs[0]["test"]["windows"],
                               test_fp32_ppl=math.exp(cs[0]["test"]["nll_fp32"]))
                rows.append(row)
                by_method[method] = row
            base = [by_method[m] for m in BASELINES if m in by_method]
            if base and "rwkvquant" in by_method:
                best = min(base, key=lambda r: r["dppl_stats"]["mean"])
                goal = {"bits": bits, **_paired_ratio(by_method["rwkvquant"], best)}
                if all("kl" in r for r in (*base, by_method["rwkvquant"])):
                    goal["kl"] = _field_ratio(by_method["rwkvquant"], min(base, key=lambda r: r["kl_stats"]["mean"]))
                if all("even" in r for r in (*base, by_method["rwkvquant"])):
                    goal["even"] = _field_ratio(by_method["rwkvquant"],
                                                min(base, key=lambda r: r["even_stats"]["mean"]), "even")
                if all("test_dppl" in r for r in (*base, by_method["rwkvquant"])):
                    goal["test"] = _paired_ratio(by_method["rwkvquant"],
                                                 min(base, key=lambda r: r["test_dppl_stats"]["mean"]), "test_dppl")
                goals.append(goal)
        results.append({"model": name, "size": sizes[name], "fp32_ppl": fp, "eval_tokens": fps[0]["n_tokens"],
                        "fp32_size_bytes": fps[0]["size_bytes"], "rows": rows, "goals": goals})
    return results


def weight_kurtosis(model: str, size: str) -> dict:
    """Excess kurtosis of each block linear (att/ffn weight matrices) of a reference model: -1.2 is uniform,
    0 Gaussian, trained LLM checkpoints are far above 0."""
    from scipy import stats

    from edgesmith.models import get_producer
    from edgesmith.models.rwkv.checkpoint import load_rwkv
    from edgesmith.models.rwkv.train import reference_paths

    m = load_rwkv(reference_paths(get_producer(model).version, size=size)[0])
    per: dict = {}
    for n, p in m.named_parameters():
        if p.ndim == 2 and n.endswith(".weight") and (".att." in n or ".ffn." in n):
            per.setdefault(n.split(".", 2)[2], []).append(float(stats.kurtosis(p.detach().numpy().ravel())))
    every = [k for ks in per.values() for k in ks]
    return {"median": float(np.median(every)), "min": float(min(every)), "max": float(max(every)),
            "by_matrix": {k: [round(x, 2) for x in v] for k, v in per.items()}}


def _layers(report: dict) -> tuple[str, int, dict] | None:
    """(method, bits, per-layer reports by name) of a quantized cell; None for fp32 or a report without layers."""
    for var in report["variants"]:
        for quant in var["pass_reports"]:
            cfg = quant["config"]
            if "bits" in cfg and quant.get("layers"):
                return cfg["kind"].removeprefix("rwkv-"), cfg["bits"], {l["name"]: l for l in quant["layers"]}
    return None


def decision_costs(reports: list[dict]) -> dict:
    """Where RWKVQuant's two departures from GPTQ go, read from the cells' per-layer reports, per model and bit
    width: the matrices its proxy sent to VQ (with on how many seeds), the Hessian-weighted error GPTVQ leaves on
    exactly those matrices over the one GPTQ leaves (mean of the per-matrix ratios, paired by seed), and the
    weighted error of its token-shift vector codebooks against the baselines' plain k-means (sums over vectors,
    mean over seeds)."""
    cells: dict = {}
    for report in reports:
        got = _layers(report)
        if got:
            method, bits, layers = got
            cells.setdefault((report["model"], bits), {}).setdefault(report["seed"], {})[method] = layers
    out: dict = {}
    for (model, bits), seeds in sorted(cells.items()):
        chosen, ratios, mine, plain, n_matrices = {}, [], [], [], 0
        for by in seeds.values():
            rq = by.get("rwkvquant")
            if rq is None:
                continue
            n_matrices = max(n_matrices, sum(1 for l in rq.values() if l["action"].startswith("quantized")))
            vq = [n for n, l in rq.items() if l["action"] == "quantized-VQ"]
            for n in vq:
                chosen[n] = chosen.get(n, 0) + 1
            if "gptq" in by and "gptvq" in by:
                ratios += [by["gptvq"][n]["error"]["hessian_rel_error"] / by["gptq"][n]["error"]["hessian_rel_error"]
                           for n in vq if by["gptq"][n]["error"]["hessian_rel_error"] > 0]
            vec = [l["error"] for l in rq.values() if l["action"] == "codebook"]
            if vec:
                mine.append(sum(e["weighted_error"] for e in vec))
                plain.append(sum(e["unweighted_kmeans_weighted_error"] for e in vec))
        if not chosen and not mine:
            continue
        out.setdefault(model, []).append({
            "bits": bits, "vq_matrices": chosen, "n_matrices": n_matrices,
            "gptvq_over_gptq_hessian_error": float(np.mean(ratios)) if ratios else None,
            "vector_weighted_error": {"rwkvquant": float(np.mean(mine)), "plain_kmeans": float(np.mean(plain))}
            if mine else None})
    return out


def _decision_lines(costs: list[dict]) -> list[str]:
    lines = []
    for c in costs:
        names = ", ".join(f"{n.removeprefix('blocks.')}" + (f" ({k} seeds)" if k != max(c["vq_matrices"].values()) else "")
                          for n, k in c["vq_matrices"].items())
        text = f"- {c['bits']}-bit: RWKVQuant sent {len(c['vq_matrices'])} of {c['n_matrices']} matrices to VQ ({names})"
        if c["gptvq_over_gptq_hessian_error"] is not None:
            text += (f"; on them GPTVQ's Hessian-weighted error is {c['gptvq_over_gptq_hessian_error']:.2f}x GPTQ's "
                     "(mean per matrix and seed)")
        if c["vector_weighted_error"]:
            v = c["vector_weighted_error"]
            text += (f"; its weighted vector codebooks: weighted error {v['rwkvquant']:.3g} against {v['plain_kmeans']:.3g} "
                     "for plain k-means (sum over vectors)")
        lines.append(text)
    return lines


def weight_facts(model: str, size: str) -> dict | None:
    """How the reference weights the table scores were trained (the facts file ``train`` writes beside them:
    steps, batch, learning rate, device, held-out perplexity), or None when there is none."""
    import json

    from edgesmith.models import get_producer
    from edgesmith.models.rwkv.train import reference_paths

    js = reference_paths(get_producer(model).version, size=size)[1]
    return json.loads(js.read_text()) if js.exists() else None


def run_seeds(recipe: Path, sweep_dir: Path, *, models=None, workers: int | None = None, ray: str | None = None,
              test_windows: int = 0, log=print) -> tuple[list[dict], dict, dict]:
    """Run (or resume) the sweep; returns the seed table, the sweep's run facts and ``decision_costs``.
    ``test_windows``: see ``fidelity_of_cells``."""
    from edgesmith.bench.sweep import cell_report, load_sweep, require_done, run_sweep

    def run(select):
        sweep = require_done(run_sweep(recipe, sweep_dir, workers=workers, ray=ray, log=log, select=select), sweep_dir)
        return sweep, [with_spec(cell_report(sweep_dir, c["key"]), c.get("spec")) for c in sweep["cells"]]

    def wanted(cell):
        return models is None or cell.spec["model"] in models

    def first(cell):  # every cell but the candidate percentiles' other seeds
        return wanted(cell) and (_candidate(cell.spec) is None or cell.spec["seed"] == CHOICE_SEED)

    groups: dict = {}
    for cell in load_sweep(recipe)[1]:
        if (c := _candidate(cell.spec)) is not None:
            groups.setdefault(c[0], set()).add(c[1])
    select = None if models is None else wanted
    if any(len(p) > 1 for p in groups.values()):  # RWKVQuant's percentile is chosen on seed 0, then run on all
        _, reports = run(first)
        chosen = {k: v["chosen"] for k, v in percentile_choices(reports)[1].items()}
        if log:
            log("[rwkv_quant_seeds] percentiles chosen on validation: "
                + ", ".join(f"{m} {b}-bit {p:g}" for (m, b), p in sorted(chosen.items())))
        select = lambda cell: first(cell) or (wanted(cell) and  # noqa: E731
                                              (c := _candidate(cell.spec)) is not None and chosen.get(c[0], c[1]) == c[1])
    sweep, reports = run(select)
    results, costs = table_of_sweeps([(sweep_dir, c["key"], r) for c, r in zip(sweep["cells"], reports)],
                                     test_windows=test_windows, log=log)
    return results, sweep["run"], costs


def finished_sweep(sweep_dir: Path) -> tuple[dict, list[tuple[Path, str, dict]]]:
    """The run facts (its recipe among them) and the cells, each (folder, key, deploy report), of the sweep
    already run in ``sweep_dir`` (its ``sweep.json``)."""
    import json

    from edgesmith.bench.sweep import cell_report, require_done

    path = Path(sweep_dir) / "sweep.json"
    if not path.is_file():
        raise EdgesmithError(f"{sweep_dir} holds no sweep report (sweep.json).",
                             "name a folder that a run of this script (--sweep-dir) wrote.")
    sweep = require_done(json.loads(path.read_text()), sweep_dir)
    return sweep["run"], [(Path(sweep_dir), c["key"], with_spec(cell_report(sweep_dir, c["key"]), c.get("spec")))
                          for c in sweep["cells"]]


def table_of_sweeps(cells: list[tuple[Path, str, dict]], *, test_windows: int = 0,
                    log=print) -> tuple[list[dict], dict]:
    """The seed table and ``decision_costs`` of the cells, each (sweep folder, key, deploy report), of one or more
    sweeps: two models run in two folders at once, say. The fidelity figures are added to the kept cells
    (``fidelity_of_cells``, with ``test_windows``; the candidate percentiles not chosen need none, the table still
    lists them)."""
    reports = [r for _, _, r in cells]
    kept = sorted(percentile_choices(reports)[0])
    per_folder: dict[Path, list[tuple[str, dict]]] = {}
    for i in kept:
        folder, key, report = cells[i]
        per_folder.setdefault(folder, []).append((key, report))
    for folder, pairs in per_folder.items():
        fidelity_of_cells(folder, [k for k, _ in pairs], [r for _, r in pairs], log=log, test_windows=test_windows)
    return seed_table(reports), decision_costs([reports[i] for i in kept])


def write_tables(out_dir: Path, results: list[dict], costs: dict, payload: dict) -> str:
    """Adds each model's decision costs, weight kurtosis and weight facts to ``results``; writes the table,
    results and plot to ``out_dir`` (``payload`` says where they came from); returns the Markdown."""
    for res in results:
        res["decisions"] = costs.get(res["model"], [])
        res["kurtosis"] = weight_kurtosis(res["model"], res["size"])
        res["weights"] = weight_facts(res["model"], res["size"])
    md = markdown(results)
    write_outputs(out_dir, "_".join(r["model"] for r in results), {**payload, "models": results}, md, plot(results),
                  "dppl_vs_bpw")
    return md


def _kl(row: dict) -> str:
    if "kl_stats" not in row:
        return "-"
    s = row["kl_stats"]
    return f"{s['mean'] * 1e3:.3f}" + (f" ± {s['ci95'] * 1e3:.3f}" if s["n"] > 1 else "")


def _pm(s: dict, sign: str = "") -> str:
    return f"{s['mean']:{sign}.4f}" + (f" ± {s['ci95']:.4f}" if s["n"] > 1 else " (no calibration)")


def markdown(results: list[dict]) -> str:
    lines = []
    for res in results:
        kurt = res.get("kurtosis")
        lines += [f"### {res['model']} {res['size']} (fp32 perplexity {res['fp32_ppl']:.4f} on "
                  f"{res['eval_tokens']} bytes, {res['fp32_size_bytes'] / 1e6:.1f} MB)", ""]
        facts = res.get("weights")
        if facts:
            st = facts["settings"]
            lines += [f"Weights: {st['steps']} steps of {st['batch']} x {st['seq_len']} bytes, lr {st['lr']:g}, "
                      f"weight decay {st['weight_decay']:g}, seed {st['seed']}, on {facts.get('device', 'cpu')} "
                      f"({facts['train_seconds']:.0f} s); held-out perplexity after training "
                      f"{facts['eval_perplexity']:.3f}.", ""]
        if kurt:
            lines += [f"Block linears' excess kurtosis: median {kurt['median']:+.2f}, range {kurt['min']:+.2f} to "
                      f"{kurt['max']:+.2f} (uniform -1.2, Gaussian 0).", ""]
        lines += ["| method | bits | bpw | seeds | perplexity (mean ± 95% CI) | Δ vs fp32 (mean ± 95% CI) "
                  "| Δ per seed | KL to fp32, 1e-3 nats/byte (mean ± 95% CI) | SQ/VQ layers | quantize s |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["rows"]:
            layers = ", ".join(sorted({f"{s}/{v}" for s, v in zip(r["n_sq"], r["n_vq"])}))
            lines.append(f"| {_label(r)} | {r['bits']} | {r['bpw']:.3f} | {len(r['seeds'])} | {_pm(r['ppl_stats'])} "
                         f"| {_pm(r['dppl_stats'], '+')} | {', '.join(f'{d:+.4f}' for d in r['dppl'])} "
                         f"| {_kl(r)} | {layers} | {r['seconds']:.0f} |")
        lines.append("")
        lines += _choice_lines(res)
        if res.get("decisions"):
            lines += ["Where RWKVQuant departs from GPTQ (per-layer reports of the cells):", "",
                      *_decision_lines(res["decisions"]), ""]
        for g in res["goals"]:
            lines.append(_goal_line(g, g["bits"]))
            if g.get("kl"):
                k = g["kl"]
                lines.append(f"  - fidelity: RWKVQuant's KL to fp32 / best baseline's ({k['baseline']}) = {k['mean']:.2f} "
                             f"± {k['ci95']:.2f} (per seed {', '.join(f'{x:.2f}' for x in k['per_seed'])})")
            if g.get("even"):
                k = g["even"]
                lines.append(f"  - even part of the increase: RWKVQuant's / best baseline's ({k['baseline']}) = "
                             f"{k['mean']:.2f} ± {k['ci95']:.2f} (per seed {', '.join(f'{x:.2f}' for x in k['per_seed'])})")
        lines.append("")
        lines += _parity_lines(res)
        lines += _test_lines(res)
    return "\n".join(lines)


def _goal_line(g: dict, bits: int) -> str:
    diff = f"RWKVQuant Δ - best baseline ({g['baseline']}) Δ = {_pm(g['diff'], '+')} (paired by seed)"
    if g["status"] == "n/a":
        return f"- {bits}-bit: {diff}; goal ratio n/a ({g['why']})"
    return (f"- {bits}-bit: {diff}; ratio {g['mean']:.2f} ± {g['ci95']:.2f} (per seed "
            f"{', '.join(f'{x:.2f}' for x in g['per_seed'])}); goal <= {GOAL}: **{g['status']}**")


def _test_lines(res: dict) -> list[str]:
    rows = [r for r in res["rows"] if "test_dppl_stats" in r]
    if not rows:
        return []
    n, t = rows[0]["test_windows"]
    lines = [f"On held-out test text (`--test-windows {n}`): {n} windows, {n * (t - 1)} predicted bytes of the "
             "evaluation split past those the perplexity above reads, never read by any score or choice; torch, on "
             f"each cell's checkpoint; fp32 perplexity {rows[0]['test_fp32_ppl']:.4f}:", "",
             "| method | bits | Δ vs fp32 (mean ± 95% CI) | Δ per seed |", "|---|---|---|---|"]
    lines += [f"| {_label(r)} | {r['bits']} | {_pm(r['test_dppl_stats'], '+')} | "
              f"{', '.join(f'{d:+.4f}' for d in r['test_dppl'])} |" for r in rows]
    lines.append("")
    lines += [_goal_line(g["test"], g["bits"]) for g in res["goals"] if g.get("test")]
    return [*lines, ""]


def _label(row: dict) -> str:
    notes = [vq_note(row)] if vq_note(row) else []
    proxy = row["proxy"] if row["method"] == "rwkvquant" else "paper"
    if proxy == "oracle":
        notes.append("oracle decision: per matrix the lower Hessian-weighted error of GPTQ and GPTVQ, in hindsight")
    elif proxy != "paper":
        notes.append(f"{proxy} proxy")
    if row.get("percentile_choice"):
        notes.append(f"percentile {row['percentile_choice']['chosen']:g}, chosen on validation")
    return row["method"] + (f" ({'; '.join(notes)})" if notes else "")


def _choice_lines(res: dict) -> list[str]:
    rows = [r for r in res["rows"] if r.get("percentile_choice")]
    if not rows:
        return []
    lines = [f"RWKVQuant's threshold percentile, chosen by validation perplexity at calibration seed {CHOICE_SEED} "
             "(the evaluation perplexity of each candidate is shown, not used):", ""]
    for r in rows:
        c = r["percentile_choice"]
        cands = "; ".join(f"{q['percentile']:g} ({q['n_sq']}/{q['n_vq']} SQ/VQ): validation {q['val_ppl']:.4f}, "
                          f"evaluation {q['ppl']:.4f}" for q in c["candidates"])
        lines.append(f"- {r['bits']}-bit: {cands} -> **{c['chosen']:g}**")
    return [*lines, ""]


def _parity_lines(res: dict) -> list[str]:
    rows = [r for r in res["rows"] if "even_stats" in r]
    if not rows:
        return []
    lines = ["The increase split by the sign of the weight error (torch, evaluation windows; `nll_parity`): even = "
             "(increase of w+D + increase of the mirrored w-D) / 2, the cost of the error's size; odd = the rest, "
             "which flips with the error's sign.", "",
             "| method | bits | Δ in torch (mean ± 95% CI) | even part | odd part | even per seed | odd per seed |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {_label(r)} | {r['bits']} | {_pm(r['torch_dppl_stats'], '+')} | {_pm(r['even_stats'], '+')} "
                     f"| {_pm(r['odd_stats'], '+')} | {', '.join(f'{x:+.4f}' for x in r['even'])} "
                     f"| {', '.join(f'{x:+.4f}' for x in r['odd'])} |")
    return [*lines, ""]


def plot(results: list[dict]):
    """Perplexity increase against bpw per model, and below it the KL to fp32 and the even part of the increase
    when the rows have them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("dppl_stats", 1, "perplexity increase over fp32")]
    if any("kl_stats" in r for res in results for r in res["rows"]):
        panels.append(("kl_stats", 1e3, "KL to fp32 (1e-3 nats per byte)"))
    if any("even_stats" in r for res in results for r in res["rows"]):
        panels.append(("even_stats", 1, "even part of the increase"))
    if any("test_dppl_stats" in r for res in results for r in res["rows"]):
        panels.append(("test_dppl_stats", 1, "increase on held-out test text"))
    fig, axes = plt.subplots(len(panels), len(results), figsize=(5 * len(results), 4 * len(panels)), squeeze=False)
    for col, res in enumerate(results):
        for row, (key, scale, label) in enumerate(panels):
            ax = axes[row][col]
            for i, method in enumerate(METHODS):
                rs = sorted((r for r in res["rows"] if r["method"] == method and key in r), key=lambda r: r["bpw"])
                if rs:
                    ax.errorbar([r["bpw"] for r in rs], [r[key]["mean"] * scale for r in rs],
                                yerr=[r[key]["ci95"] * scale for r in rs], marker="o", capsize=3, color=f"C{i}",
                                label=method)
            ax.set_title(f"{res['model']} {res['size']}")
            ax.set_xlabel("bits per weight (block linears)")
            ax.set_ylabel(f"{label} (95% CI over seeds)"), ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", type=Path, default=None,
                    help="the sweep recipe to run (default: rwkv-quant-seeds.toml); not with --join, which reads each "
                         "folder's own")
    ap.add_argument("--models", nargs="+", default=None, help="a subset of the recipe's models")
    ap.add_argument("--workers", type=int, default=None, help="sweep cells at a time (default: one per core)")
    ap.add_argument("--ray", default=None, help="run the cells on Ray: auto, an address, or local")
    ap.add_argument("--sweep-dir", type=Path, default=None, help="default: runs/sweeps/rwkv-quant-seeds")
    ap.add_argument("--out-dir", type=Path, default=Path("docs/results/rwkv_quant_seeds"))
    ap.add_argument("--join", type=Path, nargs="+", metavar="SWEEP_DIR", default=None,
                    help="make the table of sweep folders this script already ran (say one per model, each with "
                         "--models) instead of running one; computes only the figures its cells do not keep yet")
    ap.add_argument("--test-windows", type=int, default=0, metavar="N",
                    help="also score every kept cell on N windows of held-out test text (the evaluation split past "
                         "the windows the perplexity reads), with the goal on it; 0: not (default)")
    a = ap.parse_args(argv)
    if a.join and (a.recipe or a.models or a.workers is not None or a.ray or a.sweep_dir):
        ap.error("--join makes the table of sweep folders already run (each folder's sweep.json names its recipe); "
                 "--recipe, --models, --workers, --ray and --sweep-dir are for a run: give one or the other")
    if a.join and len({d.resolve() for d in a.join}) < len(a.join):
        ap.error("--join names a sweep folder twice: its cells would count twice; name each folder once")
    if a.test_windows < 0:
        ap.error(f"--test-windows is {a.test_windows}: use 0 (none) or a number of windows")
    a.recipe = a.recipe or RECIPE
    a.sweep_dir = a.sweep_dir or Path("runs/sweeps/rwkv-quant-seeds")
    try:
        if a.join:
            runs, cells = zip(*(finished_sweep(d) for d in a.join))
            results, costs = table_of_sweeps([c for part in cells for c in part], test_windows=a.test_windows)
            payload = {"sweep_dirs": [str(d) for d in a.join], "sweep_runs": list(runs)}
        else:
            results, run, costs = run_seeds(a.recipe, a.sweep_dir, models=a.models, workers=a.workers, ray=a.ray,
                                            test_windows=a.test_windows)
            payload = {"recipe": str(a.recipe), "sweep_dir": str(a.sweep_dir), "sweep_run": run}
        md = write_tables(a.out_dir, results, costs, payload)
    except EdgesmithError as e:
        raise SystemExit(str(e)) from None
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
