"""Accuracy control: give a quantized candidate that misses its budget back the fewest layers in higher precision.

The pass that quantized the variant ranks its layers by the error each one introduces (``restore_order`` in its
report: output SQNR lost across the layer on the calibration samples; cheap, no extra model runs). The search puts
back the top ``k`` of that ranking (the pass's ``exclude``) and scores the rebuilt model on the validation part only:
first with every ranked layer back (if even that misses, the variant is given up), then by bisection on ``k``, as
NNCF's ``quantize_with_accuracy_control`` does with its ranking. About log2(layers) + 1 rebuilds per variant.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

from edgesmith.hardware import Variant


@dataclass
class Restored:
    variant: Variant  # the rebuilt variant (its pass's exclude holds the restored layers)
    layers: list[str]
    probes: list[dict] = field(default_factory=list)  # {"k", "validation", "within_budget"} per rebuild, in order
    ranked: list[str] = field(default_factory=list)  # every layer the pass ranked, most harmful first


def ranked_pass(variant: Variant, pass_reports: list[dict]) -> tuple[int, list[str]] | None:
    """(index of the pass that ranks its layers, the ranking) for a variant whose pass can keep layers out
    (an ``exclude`` option) and reported a ``restore_order``; None otherwise."""
    for i in reversed(range(min(len(variant.passes), len(pass_reports)))):
        order = (pass_reports[i].get("extra") or {}).get("restore_order")
        if order and hasattr(variant.passes[i], "exclude"):
            return i, [o["layer"] for o in order]
    return None


def with_restored(variant: Variant, index: int, layers: list[str]) -> Variant:
    config = variant.passes[index]
    kept = dataclasses.replace(config, exclude=tuple(dict.fromkeys([*config.exclude, *layers])),
                               **({"allow_empty": True} if hasattr(config, "allow_empty") else {}))
    passes = [*variant.passes[:index], kept, *variant.passes[index + 1:]]
    return Variant(f"{variant.name}-restored{len(layers)}", passes, variant.runtimes[:1],
                   f"{variant.description}, {len(layers)} most harmful layer(s) kept in higher precision")


def restore(variant: Variant, pass_reports: list[dict], score: Callable[[Variant], float],
            ok: Callable[[float], bool], say: Callable[[str], None] = lambda m: None,
            progress: bool = False) -> Restored | None:
    """The fewest top-ranked layers whose restoring brings ``variant`` within budget (``ok(score(rebuilt))``), or
    None when its pass gives no ranking or even restoring every ranked layer misses. ``progress``: a bar over the
    rebuilds (at most 1 + ceil(log2(layers))) with its rate and ETA."""
    from tqdm.auto import tqdm

    found = ranked_pass(variant, pass_reports)
    if found is None:
        return None
    index, order = found
    probes, built = [], {}
    bar = tqdm(total=1 + math.ceil(math.log2(max(len(order), 1))), desc=f"{variant.name}: restoring layers",
               unit="rebuild", disable=not progress, leave=False)

    def probe(k: int) -> bool:
        v = with_restored(variant, index, order[:k])
        value = score(v)
        probes.append({"k": k, "validation": value, "within_budget": bool(ok(value))})
        built[k] = v
        bar.update(1)
        say(f"[edgesmith] {variant.name}: {k} of {len(order)} layer(s) restored -> {value:.4g} on validation"
            + (" (within budget)" if probes[-1]["within_budget"] else ""))
        return probes[-1]["within_budget"]

    lo, hi = 0, len(order)
    try:
        if not probe(hi):
            return Restored(None, [], probes, order)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if probe(mid):
                hi = mid
            else:
                lo = mid
    finally:
        bar.close()
    return Restored(built[hi], order[:hi], probes, order)
