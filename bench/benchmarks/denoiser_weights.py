"""Retrain the denoiser weights that ship in ``models/weights/`` and compare them byte for byte: a script.

    .venv/bin/python -m edgesmith.bench.benchmarks.denoiser_weights --cache /tmp/retrain [--tiny-only]

Trains, in an empty cache (``EDGESMITH_CACHE`` = ``--cache``, shipped weights switched off with
``EDGESMITH_NO_SHIPPED_WEIGHTS=1``), what ``edgesmith denoise`` and ``make demo`` load: the default S5
denoiser and its prune-lrnn and qat-lrnn models at the host-cpu plan's options (about 25 minutes on 2
cores), and the seconds-long tiny model with the demo's Lava options. Prints each file's name, whether a
shipped file has that name and whether the bytes are equal; exit status 1 if any differs. Same seed, same
torch build (the cache keys hold the torch version), same bytes: training is deterministic on CPU.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import tempfile
from pathlib import Path

SETTINGS = {  # (model options, target, kind options): the builds the shipped files stand for
    "default": ({}, "host-cpu", {}),
    "tiny-demo": ({"tiny": True}, "loihi2", {"prune_epochs": 1, "qat_epochs": 1}),
}


def retrain(cache: Path, names=tuple(SETTINGS), log=print) -> list[dict]:
    os.environ["EDGESMITH_CACHE"] = str(cache)
    os.environ["EDGESMITH_NO_SHIPPED_WEIGHTS"] = "1"
    from edgesmith.bench.deploy import source_artifact
    from edgesmith.common import SHIPPED_WEIGHTS
    from edgesmith.compress import PassContext, run_passes
    from edgesmith.hardware import PlanOptions, get_target
    from edgesmith.models import get_producer

    for name in names:
        model_options, target, options = SETTINGS[name]
        log(f"{name}: training the dense model, then prune-lrnn and qat-lrnn ({target} plan options {options})")
        p = get_producer("lrnn-denoiser", **model_options).build()
        plan = get_target(target).plan(p, PlanOptions(options=options, variants=["sparse-fixed"]))
        passes = [c for c in plan.variants[0].passes if c.kind in ("prune-lrnn", "qat-lrnn")]
        with tempfile.TemporaryDirectory() as work:
            run_passes(source_artifact(p), passes, PassContext(workdir=Path(work), train_data=p.training_data()))
    rows = []
    for f in sorted((cache / "models").glob("*.pt")):
        shipped = SHIPPED_WEIGHTS / f.name
        rows.append({"file": f.name, "shipped": shipped.exists(),
                     "identical": shipped.exists() and filecmp.cmp(f, shipped, shallow=False)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True, help="an empty folder for the retrained cache")
    ap.add_argument("--tiny-only", action="store_true", help="only the seconds-long tiny model (a quick check)")
    a = ap.parse_args(argv)
    if a.cache.exists() and any(a.cache.iterdir()):
        from edgesmith.common import EdgesmithError

        raise EdgesmithError(f"{a.cache} is not empty.", "pass a new or empty folder: cached models would not be retrained.")
    rows = retrain(a.cache, ("tiny-demo",) if a.tiny_only else tuple(SETTINGS))
    for r in rows:
        print(f"{r['file']}: {'byte-identical to the shipped file' if r['identical'] else 'DIFFERS' if r['shipped'] else 'not shipped'}")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
