"""OOD-score monitor for compressed classifiers: does compression move the OOD scores?

A producer opts in with ``ood_inputs()`` -> ``{"id": held-out ID inputs, "<set>": OOD inputs, ...}``.
From the *outputs* of each runtime (so it works for torch, int8 ONNX, int4 ONNX alike) the monitor
computes, per score (MSP, energy, Mahalanobis; see ``models.papers.ood.scores``):

- AUROC of ID vs each OOD set and vs all OOD sets pooled, plus the oracle linear probe (trained on
  half of ID and OOD features; an upper bound, it sees OOD data);
- the shift of the score distributions against the fp32 reference on the same inputs: the
  Kolmogorov-Smirnov distance and the mean shift, on ID and on pooled OOD inputs;
- the share of ID inputs the compressed model would flag as OOD with the fp32 threshold set to keep
  95% of ID inputs (0.05 when nothing moved): the cost of reusing an fp32-calibrated monitor;
- histograms on bins fixed by the reference, for the report's plot.

Features for Mahalanobis: a producer whose outputs carry features declares
``split_outputs(outputs) -> (logits, features)`` (``ood-gauss`` outputs logits then penultimate
features); otherwise the logits are the features (all a runtime hands back). The Mahalanobis class
means and shared covariance are fitted ONCE, on the fp32 reference's outputs for training-split
inputs (``calibration_data``) with the reference's predicted classes as labels (the monitor knows
no training labels), and reused unchanged for every variant, as a monitor calibrated before
compression would be.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ood.scores import SCORES, MahalanobisFit, all_scores, auroc, fit_mahalanobis, oracle_probe_auroc

N_FIT = 512
N_BINS = 30
ID_KEEP = 0.95


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(np.asarray(a, dtype=np.float64).ravel()), np.sort(np.asarray(b, dtype=np.float64).ravel())
    if a.size == 0 or b.size == 0:
        raise EdgesmithError("the KS distance needs two non-empty samples.", "pass scores for both models.")
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, side="right") / a.size
                               - np.searchsorted(b, grid, side="right") / b.size)))


def _split(producer, outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    split = getattr(producer, "split_outputs", None)
    out = np.asarray(outputs)
    if split is not None:
        return split(out)
    out = out.reshape(len(out), -1)
    return out, out


def check_ood_inputs(producer) -> dict[str, np.ndarray] | None:
    """The producer's OOD inputs, validated; None when it offers none."""
    hook = getattr(producer, "ood_inputs", None)
    sets = hook() if hook is not None else None
    if sets is None:
        return None
    if "id" not in sets or len(sets) < 2:
        raise EdgesmithError(f"{producer.name}.ood_inputs() must give an 'id' set and at least one OOD set.",
                             "return {'id': held-out inputs, '<name>': OOD inputs, ...}.")
    for name, x in sets.items():
        producer.check_input(np.asarray(x))
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sets.items()}


@dataclass
class OODReference:
    """What the fp32 model gives: inputs, Mahalanobis fit, scores per set, thresholds and histogram bins."""

    sets: dict[str, np.ndarray]
    fit: MahalanobisFit
    scores: dict[str, dict[str, np.ndarray]]  # set -> score -> values
    thresholds: dict[str, float]
    edges: dict[str, np.ndarray]
    entry: dict = field(default_factory=dict)  # the reference's own figures (as ``ood_entry`` gives)


def _scores(producer, predict, sets: dict[str, np.ndarray], fit: MahalanobisFit) -> tuple[dict, dict]:
    # one call over every set: a simulator (Lava) pays its start-up once, not once per set
    outputs = np.asarray(predict(np.concatenate(list(sets.values()))))
    bounds = np.cumsum([0] + [len(x) for x in sets.values()])
    scores, feats = {}, {}
    for name, lo, hi in zip(sets, bounds[:-1], bounds[1:]):
        logits, f = _split(producer, outputs[lo:hi])
        scores[name] = all_scores(logits, f, fit)
        feats[name] = f
    return scores, feats


def _entry(scores: dict, feats: dict, ref: "OODReference | None", edges: dict, thresholds: dict, seed: int) -> dict:
    ood_names = [k for k in scores if k != "id"]
    aurocs = {}
    for s in SCORES:
        pooled = np.concatenate([scores[k][s] for k in ood_names])
        aurocs[s] = {**{k: auroc(scores["id"][s], scores[k][s]) for k in ood_names},
                     "pooled": auroc(scores["id"][s], pooled)}
    aurocs["oracle"] = {k: oracle_probe_auroc(feats["id"], feats[k], seed=seed) for k in ood_names}
    entry = {"sets": {k: int(len(v["msp"])) for k, v in scores.items()}, "auroc": aurocs,
             "id_flag_rate_at_fp32_threshold": {s: float(np.mean(scores["id"][s] < thresholds[s])) for s in SCORES},
             "hist": {}}
    for s in SCORES:
        pooled = np.concatenate([scores[k][s] for k in ood_names])
        e = edges[s]
        entry["hist"][s] = {"edges": e.tolist(),
                            "id": np.histogram(np.clip(scores["id"][s], e[0], e[-1]), e)[0].tolist(),
                            "ood": np.histogram(np.clip(pooled, e[0], e[-1]), e)[0].tolist()}
    if ref is not None:
        entry["shift_vs_fp32"] = {}
        for s in SCORES:
            r_ood = np.concatenate([ref.scores[k][s] for k in ood_names])
            m_ood = np.concatenate([scores[k][s] for k in ood_names])
            entry["shift_vs_fp32"][s] = {
                "ks_id": ks_distance(ref.scores["id"][s], scores["id"][s]),
                "ks_ood": ks_distance(r_ood, m_ood),
                "mean_shift_id": float(scores["id"][s].mean() - ref.scores["id"][s].mean()),
                "mean_shift_ood": float(m_ood.mean() - r_ood.mean()),
                "auroc_delta_pooled": aurocs[s]["pooled"] - ref.entry["auroc"][s]["pooled"],
            }
    return entry


def ood_reference(producer, predict, n_fit: int = N_FIT, seed: int = 0) -> OODReference | None:
    """Fit the monitor on the fp32 model (``predict``); None when the producer gives no OOD inputs."""
    sets = check_ood_inputs(producer)
    if sets is None:
        return None
    logits, feats = _split(producer, predict(producer.calibration_data(n_fit)))
    fit = fit_mahalanobis(feats, np.argmax(logits, axis=1))
    scores, all_feats = _scores(producer, predict, sets, fit)
    thresholds = {s: float(np.quantile(scores["id"][s], 1 - ID_KEEP)) for s in SCORES}
    edges = {}
    for s in SCORES:
        vals = np.concatenate([v[s] for v in scores.values()])
        lo, hi = np.percentile(vals, [0.5, 99.5])
        pad = 0.05 * (hi - lo) if hi > lo else 1.0
        edges[s] = np.linspace(lo - pad, hi + pad, N_BINS + 1)
    ref = OODReference(sets, fit, scores, thresholds, edges)
    ref.entry = _entry(scores, all_feats, None, edges, thresholds, seed)
    return ref


def ood_entry(producer, predict, ref: OODReference, seed: int = 0) -> dict:
    """The monitor's figures for one (compressed) model, against the fp32 reference ``ref``."""
    scores, feats = _scores(producer, predict, ref.sets, ref.fit)
    return _entry(scores, feats, ref, ref.edges, ref.thresholds, seed)
