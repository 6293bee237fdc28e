"""Per-layer sensitivity: quantize one layer at a time and score the result with the producer's metric.

A pass that supports it hands over a function ``quantize_only(layer, out_path) -> Artifact`` that
writes a model where only ``layer`` is quantized (all others stay fp32). The table says which
layers cost the most metric, i.e. which ones to keep in fp32 (``exclude``) when accuracy drops.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable

from edgesmith.compress.base import Artifact, PassContext, PassReport


def sensitivity_requested(ctx: PassContext, report: PassReport) -> bool:
    """True when the context asks for a table and can score models; notes why not otherwise."""
    if not ctx.sensitivity:
        return False
    if ctx.evaluate is None:
        report.notes.append("sensitivity was requested but no evaluate function was given; table skipped.")
        return False
    return True


def sensitivity_table(
    baseline: Artifact,
    layers: list[str],
    quantize_only: Callable[[str, Path], Artifact],
    ctx: PassContext,
    *,
    suffix: str = ".onnx",
    desc: str = "sensitivity",
) -> list[dict]:
    """Score the fp32 ``baseline`` and one model per layer; return one row per layer.

    Rows are ``{"layer", "metric", "fp32_metric", "delta"}`` with ``delta = metric - fp32_metric``
    (its sign reads with the metric's direction: for accuracy, negative is worse). Temporary models are written
    under ``ctx.workdir`` and removed afterwards.
    """
    from tqdm import tqdm

    base = float(ctx.evaluate(baseline))
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix=".sensitivity.", dir=ctx.workdir))
    try:
        for i, layer in enumerate(tqdm(layers, desc=desc, disable=not ctx.progress, leave=False)):
            art = quantize_only(layer, tmp / f"layer{i}{suffix}")
            metric = float(ctx.evaluate(art))
            rows.append({"layer": layer, "metric": metric, "fp32_metric": base, "delta": metric - base})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows
