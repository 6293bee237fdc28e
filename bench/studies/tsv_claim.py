"""Paper 18 claim: TSV separates truthful from hallucinated responses better than an unsteered probe,
and the optimal-transport stage adds to the exemplars; then the same detector on RWKVQuant models.

    .venv/bin/python -m edgesmith.bench.studies.tsv_claim --out runs/tsv-claim [--force] [--quick] [--seeds 0 1 2 3 4]

One LM (``tsv-rwkv``: the RWKV-7 reference fine-tuned on the synthetic fact world, ``world_seed`` 0)
serves every seed; a seed draws the question split, the 32 labelled exemplars and the TSV
initialisation. Methods, all scored by AUROC on held-out responses (truthful positive):

- ``probe``: logistic regression on the 32 exemplars' unsteered embeddings (the same normalised
  last-token state TSV reads);
- ``exemplars only``: TSV trained on the 32 exemplars (stage 1 only);
- ``TSV``: both stages (Sinkhorn pseudo-labels on the unlabelled responses, most confident kept).

Then the LM is quantized with RWKVQuant (``compress.rwkvquant``, 3 and 4 bits, calibrated on
fine-tuning text) and each seed's trained detector (steering vector and prototypes unchanged) and
probe are applied to the quantized model: the AUROC shift is what compression costs the detector.
Writes table.json, table.md, auroc.png and scores.png into --out, atomically.
"""
from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from edgesmith.models import get_producer
from edgesmith.bench.studies.claim_io import refuse_existing, write_claim
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ood.scores import auroc
from edgesmith.models.papers.tsv.facts import corpus
from edgesmith.models.papers.tsv.method import SteeredRWKV, embed, train_tsv, truth_scores

METHODS = ("probe", "exemplars only", "TSV")


def _auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    return auroc(scores[labels == 1], scores[labels == 0])


def probe_fit(steered: SteeredRWKV, x: np.ndarray, y: np.ndarray):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=2000).fit(embed(steered, x, steer=False).numpy(), y)


def run_seed(seed: int, tiny: bool, lm, qlms: dict) -> dict:
    p = get_producer("tsv-rwkv", seed=seed, tiny=tiny)
    p.lm_ = lm
    s, cfg = p.splits(), p.tsv_cfg
    plain = SteeredRWKV(lm, cfg.layer, cfg.lam)
    probe = probe_fit(plain, s.exemplars, s.exemplar_labels)
    ex_only = train_tsv(lm, s.exemplars, s.exemplar_labels, None, cfg, seed=seed)
    full = train_tsv(lm, s.exemplars, s.exemplar_labels, s.wild, cfg, seed=seed)
    scores = {"probe": probe.decision_function(embed(plain, s.test, steer=False).numpy()),
              "exemplars only": truth_scores(ex_only.steered, ex_only.prototypes, s.test, cfg.kappa),
              "TSV": truth_scores(full.steered, full.prototypes, s.test, cfg.kappa)}
    knows = answer_loglik(lm, s.test)
    sel = np.asarray(full.history["selected"], dtype=int)
    row = {"seed": seed, "auroc": {m: _auroc(v, s.test_labels) for m, v in scores.items()},
           "n_test": int(len(s.test_labels)), "n_wild": int(len(s.wild)),
           "pseudo_label_accuracy": float(np.mean(np.asarray(full.history["selected_pseudo_labels"])
                                                  == s.wild_labels[sel])),
           "n_selected": int(len(sel)), "compressed": {},
           "lm_answer_loglik_auroc": _auroc(knows, s.test_labels)}
    for name, qlm in qlms.items():
        q_tsv = SteeredRWKV(qlm, cfg.layer, cfg.lam)
        q_tsv.v.data.copy_(full.steered.v.detach())
        q_scores = truth_scores(q_tsv, full.prototypes, s.test, cfg.kappa)
        q_probe = probe.decision_function(embed(q_tsv, s.test, steer=False).numpy())
        row["compressed"][name] = {"TSV": _auroc(q_scores, s.test_labels), "probe": _auroc(q_probe, s.test_labels)}
    return {"row": row, "scores": {k: v.tolist() for k, v in scores.items()}, "labels": s.test_labels.tolist()}


@torch.no_grad()
def answer_loglik(lm, tokens: np.ndarray, n_last: int = 6) -> np.ndarray:
    """Log-likelihood the LM gives the answer bytes (the last ``n_last`` before the final "."): what the
    LM knows about each fact, read from its next-byte predictions. A reference, not a latent detector."""
    x = torch.as_tensor(tokens)
    logp = torch.log_softmax(lm(x)[0][:, :-1], -1).gather(-1, x[:, 1:, None])[..., 0]
    return logp[:, -n_last - 1:-1].sum(1).numpy()


def quantized_lms(lm, world, bits: list[int], tiny: bool) -> tuple[dict, dict]:
    """RWKVQuant copies of ``lm`` (the paper's hybrid SQ/VQ), calibrated on fine-tuning text windows."""
    from edgesmith.compress.rwkvquant import make_config, quantize_rwkv

    stream = corpus(world, 4000, np.random.default_rng(12345))
    rng = np.random.default_rng(1)
    starts = rng.integers(0, len(stream) - 41, 16 if tiny else 64)
    calib = np.stack([stream[i:i + 40] for i in starts])
    out, facts = {}, {}
    for b in bits:
        cfg = make_config("rwkvquant", bits=b, n_calibration=len(calib), kmeans_iters=10 if tiny else 30)
        qlm, rep = quantize_rwkv(lm, calib, cfg)
        out[f"rwkvquant-{b}bit"] = qlm.eval()
        facts[f"rwkvquant-{b}bit"] = {"bits_per_weight": rep.bits_per_weight, "n_sq": rep.extra["n_sq"],
                                      "n_vq": rep.extra["n_vq"], "config": cfg.to_dict()}
    return out, facts


def _ms(v) -> dict:
    v = np.asarray(v, dtype=float)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}


def summarise(rows: list[dict]) -> dict:
    out = {m: _ms([r["auroc"][m] for r in rows]) for m in METHODS}
    out["pseudo_label_accuracy"] = _ms([r["pseudo_label_accuracy"] for r in rows])
    out["lm_answer_loglik_auroc"] = _ms([r["lm_answer_loglik_auroc"] for r in rows])
    out["compressed"] = {}
    for name in rows[0]["compressed"]:
        out["compressed"][name] = {
            k: _ms([r["compressed"][name][k] for r in rows]) for k in ("TSV", "probe")}
        out["compressed"][name]["TSV shift"] = _ms([r["compressed"][name]["TSV"] - r["auroc"]["TSV"]
                                                   for r in rows])
        out["compressed"][name]["probe shift"] = _ms([r["compressed"][name]["probe"] - r["auroc"]["probe"]
                                                     for r in rows])
    return out


def claims(summary: dict) -> list[dict]:
    tsv, probe, ex = summary["TSV"]["mean"], summary["probe"]["mean"], summary["exemplars only"]["mean"]
    return [{"claim": "TSV AUROC above the unsteered linear probe (same 32 exemplars)", "value": tsv - probe,
             "reproduced": tsv > probe},
            {"claim": "the optimal-transport stage adds to exemplars only", "value": tsv - ex, "reproduced": tsv > ex}]


def _cell(d: dict) -> str:
    return f"{d['mean']:.3f} +- {d['std']:.3f}"


def markdown(result: dict) -> str:
    s = result["summary"]
    lines = [f"# Paper 18 (TSV) on RWKV-7: AUROC, mean +- std over seeds {result['seeds']}", "",
             f"LM: rwkv7-ref fine-tuned {result['lm']['steps']} steps on the synthetic fact world; it ranks the true "
             f"value first for {result['lm']['fact_recall']:.1%} of the detection facts. Test: "
             f"{result['runs'][0]['row']['n_test']} held-out responses (half truthful) about questions no training "
             "response asked; 32 labelled exemplars; "
             f"{result['runs'][0]['row']['n_wild']} unlabelled responses for the OT stage.", "",
             "| method | AUROC |", "|---|---|"]
    for m in METHODS:
        lines.append(f"| {m} | {_cell(s[m])} |")
    lines += ["", f"Pseudo-labels kept by TSV's stage 2 were right for {_cell(s['pseudo_label_accuracy'])} of them.",
              "", "Reference (not a latent detector): the LM's own log-likelihood of the answer bytes separates the "
              f"test responses with AUROC {_cell(s['lm_answer_loglik_auroc'])}, i.e. how much the LM knows; the "
              "methods above read only the normalised last-token state.", "",
              "## The same detectors on the RWKVQuant-compressed LM", "",
              "| LM | bits/weight (linears) | TSV AUROC | shift vs fp32 | probe AUROC | shift vs fp32 |",
              "|---|---|---|---|---|---|",
              f"| fp32 | 32 | {_cell(s['TSV'])} | - | {_cell(s['probe'])} | - |"]
    for name, d in s["compressed"].items():
        bpw = result["quantization"][name]["bits_per_weight"]
        lines.append(f"| {name} | {bpw:.2f} | {_cell(d['TSV'])} | {d['TSV shift']['mean']:+.3f} +- "
                     f"{d['TSV shift']['std']:.3f} | {_cell(d['probe'])} | {d['probe shift']['mean']:+.3f} +- "
                     f"{d['probe shift']['std']:.3f} |")
    lines += ["", "## Claims", "", "| claim | measured difference | reproduced |", "|---|---|---|"]
    for c in result["claims"]:
        lines.append(f"| {c['claim']} | {c['value']:+.3f} | {'yes' if c['reproduced'] else 'NO'} |")
    if not all(c["reproduced"] for c in result["claims"]):
        lines += ["", "A NO above means the claim did not reproduce at this scale. Tried: a 48-entity world with "
                  "200 fine-tuning steps (the LM knew about half the facts) and the default 40-entity world with "
                  "300 steps (it knows nearly all); verdict-bearing text about separate judge entities, so a sense "
                  "of truth could form without leaking test labels. When the last-token state does not carry "
                  "truthfulness (compare the reference above), a steering vector trained on 32 examples has "
                  "little to amplify and the OT pseudo-labels are near chance, so stage 2 cannot help."]
    lines += ["", f"date {result['date']}; settings: {result['settings']}"]
    return "\n".join(lines) + "\n"


def plot(result: dict, first: dict, folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["summary"]
    names = list(METHODS) + [f"TSV on {k}" for k in s["compressed"]]
    vals = [s[m] for m in METHODS] + [d["TSV"] for d in s["compressed"].values()]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.bar(range(len(names)), [v["mean"] for v in vals], yerr=[v["std"] for v in vals], capsize=4,
           color=["C0", "C1", "C2"] + ["C3"] * len(s["compressed"]))
    ax.axhline(0.5, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(names)), names, fontsize=8, rotation=15)
    ax.set_ylabel("AUROC (truthful vs hallucinated)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"TSV on RWKV-7, {len(result['seeds'])} seeds")
    fig.tight_layout()
    fig.savefig(folder / "auroc.png", dpi=110)
    plt.close(fig)

    labels = np.asarray(first["labels"])
    fig, axes = plt.subplots(1, len(METHODS), figsize=(4 * len(METHODS), 3))
    for ax, m in zip(axes, METHODS):
        sc = np.asarray(first["scores"][m])
        bins = np.linspace(sc.min(), sc.max() + 1e-9, 25)
        ax.hist(sc[labels == 1], bins, alpha=0.6, label="truthful")
        ax.hist(sc[labels == 0], bins, alpha=0.6, label="hallucinated")
        ax.set_title(f"{m} (seed {result['seeds'][0]})", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "scores.png", dpi=100)
    plt.close(fig)
    return ["auroc.png", "scores.png"]


def run(seeds, tiny: bool, bits, progress: bool = True) -> tuple[dict, dict]:
    torch.set_num_threads(1)
    p0 = get_producer("tsv-rwkv", seed=seeds[0], tiny=tiny)
    lm = p0.finetuned_lm()
    recall = p0.fact_recall()
    qlms, qfacts = quantized_lms(lm, p0.world(), list(bits), tiny)
    runs = [run_seed(s, tiny, lm, qlms) for s in tqdm(seeds, desc="tsv claim", unit="seed", disable=not progress)]
    rows = [r["row"] for r in runs]
    summary = summarise(rows)
    result = {"paper": "Steer LLM Latents for Hallucination Detection (TSV, ICML 2025)",
              "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "seeds": list(seeds),
              "tiny": tiny, "lm": {"steps": p0.ft_cfg.steps, "fact_recall": recall, "world_seed": p0.world_seed},
              "settings": {"world": p0.world_cfg.to_dict(), "finetune": p0.ft_cfg.to_dict(),
                           "split": p0.split_cfg.to_dict(), "tsv": p0.tsv_cfg.to_dict()},
              "quantization": qfacts, "runs": [{"row": r} for r in rows], "summary": summary,
              "claims": claims(summary)}
    return result, runs[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/tsv-claim")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny world and training, two seeds (seconds)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0..4 (0 1 with --quick)")
    ap.add_argument("--bits", type=int, nargs="+", default=[3, 4], choices=[3, 4])
    a = ap.parse_args(argv)
    seeds = a.seeds or ([0, 1] if a.quick else [0, 1, 2, 3, 4])
    if any(s < 0 for s in seeds):
        raise EdgesmithError(f"seeds {seeds} include a negative one.", "use seeds >= 0.")
    out = Path(a.out)
    refuse_existing(out, a.force)
    threads = torch.get_num_threads()
    try:
        result, first = run(seeds, a.quick, a.bits)
    finally:
        torch.set_num_threads(threads)
    print(write_claim(out, a.force, result, markdown, lambda folder: plot(result, first, folder)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
