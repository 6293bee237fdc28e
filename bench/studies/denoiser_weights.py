"""Retrain the denoiser weights that ship in ``models/weights/`` and compare them byte for byte: a script.

    .venv/bin/python -m edgesmith.bench.studies.denoiser_weights --cache /tmp/retrain [--tiny-only]

Trains, in empty caches (``EDGESMITH_CACHE`` = ``--cache``/SETTING, shipped weights switched off with
``EDGESMITH_NO_SHIPPED_WEIGHTS=1``), what ``edgesmith denoise`` and ``make demo`` load: the default S5
denoiser and its prune-lrnn and qat-lrnn models at the host-cpu plan's options (about an hour on 2 cores;
its data needs the real talkers' Debian packages, which ``make setup`` installs), and the seconds-long tiny
model with the tests' Lava options. Prints, for each retrained file, the
shipped file it stands for and whether the bytes are equal; exit status 1 if any differs beyond float rounding.
Same seed, same torch build (the cache keys hold the torch version), same CPU kernels: same bytes, training is
deterministic on CPU. A CPU whose float kernels differ (the files were made on an AVX2-only AMD EPYC; on an
AVX-512 Xeon, 2026-12-05, the tiny models came out within 8.6e-6 of each tensor's magnitude) gives other bytes, and so other cache keys
for the pruned and QAT models, which embed the dense model's bytes: those are compared with the shipped file
of the same stage, tensor by tensor, and reported as equal to float rounding when every tensor's largest
difference is at most ``--tolerance`` times its largest magnitude.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import tempfile
from pathlib import Path

SETTINGS = {  # (model options, target, kind options): the builds the shipped files stand for
    "default": ({}, "host-cpu", {}),
    "tiny-demo": ({"tiny": True}, "loihi2", {"prune_epochs": 1, "qat_epochs": 1}),  # the tests' Lava deploys
}
STAGES = ("lrnn-denoiser", "prune-lrnn", "qat-lrnn")  # each file's name begins with its stage
SHIPPED = {  # the shipped file of each setting and stage (models/weights/README.md)
    "default": ("lrnn-denoiser-d578552d63875581.pt", "prune-lrnn-721a278e93d82904.pt", "qat-lrnn-cecdf2ea9693c565.pt"),
    "tiny-demo": ("lrnn-denoiser-7a20d02cccebac07.pt", "prune-lrnn-f664c2fc8edca9f3.pt", "qat-lrnn-35c277efebe2464f.pt"),
}
TOLERANCE = 1e-4


def largest_difference(a, b) -> float:
    """The largest over tensors of max |a - b| / max |b| between two saved objects (state dicts, nested dicts
    and lists of tensors and plain values); inf where their structure or any plain value differs."""
    import torch

    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return float("inf")
        return max((largest_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return float("inf")
        return max((largest_difference(x, y) for x, y in zip(a, b)), default=0.0)
    if torch.is_tensor(a) and torch.is_tensor(b):
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if not a.is_floating_point():
            return 0.0 if torch.equal(a, b) else float("inf")
        scale = b.abs().max().item() if b.numel() else 0.0
        diff = (a.double() - b.double()).abs().max().item() if b.numel() else 0.0
        return 0.0 if diff == 0 else diff / scale if scale > 0 else float("inf")
    return 0.0 if a == b else float("inf")


def retrain(cache: Path, names=tuple(SETTINGS), log=print) -> list[dict]:
    os.environ["EDGESMITH_NO_SHIPPED_WEIGHTS"] = "1"
    from edgesmith.bench.pipeline.deploy import source_artifact
    from edgesmith.common import SHIPPED_WEIGHTS
    from edgesmith.compress import PassContext, run_passes
    from edgesmith.hardware import PlanOptions, get_target
    from edgesmith.models import get_producer

    import torch

    rows = []
    for name in names:
        model_options, target, options = SETTINGS[name]
        os.environ["EDGESMITH_CACHE"] = str(cache / name)  # one cache per setting: one file per stage in each
        log(f"{name}: training the dense model, then prune-lrnn and qat-lrnn ({target} plan options {options})")
        p = get_producer("lrnn-denoiser", **model_options).build()
        plan = get_target(target).plan(p, PlanOptions(options=options, variants=["sparse-fixed"]))
        passes = [c for c in plan.variants[0].passes if c.kind in ("prune-lrnn", "qat-lrnn")]
        with tempfile.TemporaryDirectory() as work:
            run_passes(source_artifact(p), passes, PassContext(workdir=Path(work), train_data=p.training_data()))
        for stage, shipped_name in zip(STAGES, SHIPPED[name]):
            made = sorted((cache / name / "models").glob(f"{stage}-*.pt"))
            shipped = SHIPPED_WEIGHTS / shipped_name
            row = {"setting": name, "stage": stage, "file": made[0].name if made else None, "shipped": shipped_name,
                   "identical": False, "largest_difference": float("inf")}
            if len(made) == 1 and shipped.exists():
                row["identical"] = made[0].name == shipped_name and filecmp.cmp(made[0], shipped, shallow=False)
                row["largest_difference"] = 0.0 if row["identical"] else largest_difference(
                    torch.load(made[0], weights_only=False), torch.load(shipped, weights_only=False))
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True, help="an empty folder for the retrained cache")
    ap.add_argument("--tiny-only", action="store_true", help="only the seconds-long tiny model (a quick check)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE,
                    help="largest difference per tensor, relative to its largest magnitude, accepted as float rounding")
    a = ap.parse_args(argv)
    if a.cache.exists() and any(a.cache.iterdir()):
        from edgesmith.common import EdgesmithError

        raise EdgesmithError(f"{a.cache} is not empty.", "pass a new or empty folder: cached models would not be retrained.")
    rows = retrain(a.cache, ("tiny-demo",) if a.tiny_only else tuple(SETTINGS))
    for r in rows:
        if r["identical"]:
            verdict = "byte-identical to the shipped file"
        elif r["largest_difference"] <= a.tolerance:
            verdict = (f"equal to float rounding: largest difference {r['largest_difference']:.2g} of a tensor's "
                       "magnitude (other bytes: this CPU's float kernels differ from the ones that made it)")
        else:
            verdict = f"DIFFERS (largest difference {r['largest_difference']:.3g} of a tensor's magnitude)"
        print(f"{r['setting']} {r['stage']}: {r['file']} vs shipped {r['shipped']}: {verdict}")
    return 0 if all(r["identical"] or r["largest_difference"] <= a.tolerance for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
