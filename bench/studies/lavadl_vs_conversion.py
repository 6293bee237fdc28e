"""A Sigma-Delta classifier trained by lava-dl (SLAYER) vs the same-width MLP converted by edgesmith, on Loihi 2.

    .venv/bin/python -m edgesmith.bench.studies.lavadl_vs_conversion --out runs/lavadl [--force] [--quick]

Both networks classify the 8x8 digits split (1,437 train / 360 test) with dense layers 64-128-64-10:
  * ``lavadl-digits``: SLAYER ``sigma_delta`` blocks trained with quantization in the loop and exported
    by lava-dl's own ``export_hdf5`` (the file is deployed as it is);
  * ``digits-mlp``: a float ReLU MLP trained in torch, converted by edgesmith's ``export-netx`` pass.
Each goes through ``edgesmith deploy ... --target loihi2``: Lava (lava-dl's netx loader,
``Loihi2SimCfg(fixed_pt)``) on the test split, checked bit for bit against ``netx-ref``, with activity
counts per sample and Loihi 2 energy/latency **estimated** by the per-layer core-mapping cost model.
The float accuracy is the model before Lava: SLAYER's own forward pass, or the fp32 torch MLP.
Writes ``table.json``, ``table.md`` and ``comparison.png`` (accuracy vs estimated energy per sample).
``--quick`` trains a 16-unit lava-dl network for 2 epochs and scores 48 test samples (the test suite's run).
"""
from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np
from edgesmith.bench.studies.claim_io import claim_main
from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
from edgesmith.models import get_producer

QUICK_LAVADL = {"hidden": (16,), "epochs": 2}


def _slayer_logits(p) -> np.ndarray:
    return p.slayer_test_logits_  # SLAYER's own forward pass, saved by the training worker


def _torch_logits(p) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return p.module(torch.from_numpy(p.test_data()[0])).numpy()


def _float_accuracy(name: str, options: dict, logits_of, n_eval: int | None) -> float:
    p = get_producer(name, seed=0, **options).build()
    y = p.test_data()[1]
    n = n_eval or len(y)
    return float(np.mean(logits_of(p)[:n].argmax(1) == y[:n]))


def _row(label: str, how: str, report: dict, float_acc: float) -> dict:
    (lava,) = [r for r in report["results"] if r["runtime"] == "lava"]
    act, energy = lava["activity"], lava["energy"]
    bd = energy["breakdown"]
    steps = act["timesteps"]
    return {"model": label, "how": how, "variant": lava["variant"], "float_accuracy": float_acc,
            "lava_accuracy": lava["evaluation"]["value"], "n_samples": lava["evaluation"]["n_samples"],
            "lava_vs_reference_max_abs_diff": lava["bit_exact_reference"]["max_abs_diff"],
            "timesteps_per_sample": steps, "synops_per_sample": act["synops"],
            "messages_per_sample": act["messages"], "neuron_updates_per_sample": act["neuron_updates"],
            "cores": bd["cores_used"], "busiest_layer": bd["busiest_core_layer"],
            "energy_j_per_sample": energy["energy_j_per_sample"], "latency_s_per_sample": energy["latency_s"],
            "energy_provenance": f"estimated ({energy['cost_model']})", "file_bytes": lava["size_bytes"],
            "notes": report["notes"]}


def run(quick: bool, workdir: Path) -> dict:
    lavadl_opts = QUICK_LAVADL if quick else {}
    eval_args = {}
    n_eval = None
    if quick:  # a slice of the test split as the user's evaluation data
        n_eval = 48
        x, y = get_producer("digits-mlp", seed=0).test_data()
        np.save(workdir / "x.npy", x[:n_eval]), np.save(workdir / "y.npy", y[:n_eval])
        eval_args = {"eval_data": str(workdir / "x.npy"), "labels": str(workdir / "y.npy")}
    rows = []
    for name, opts, how, logits_of in (
            ("lavadl-digits", lavadl_opts, "trained by lava-dl SLAYER, exported by lava-dl", _slayer_logits),
            ("digits-mlp", {}, "fp32 torch MLP converted by edgesmith export-netx", _torch_logits)):
        folder = deploy(DeployOptions(model=name, target="loihi2", out=workdir / name, force=True, reps=5, warmup=1,
                                      batch_sizes=(1,), progress=False, model_options=dict(opts), **eval_args))
        report = json.loads((folder / "report.json").read_text())
        rows.append(_row(name, how, report, _float_accuracy(name, opts, logits_of, n_eval)))
    return {"date": _dt.date.today().isoformat(), "quick": quick, "lavadl_options": {k: list(v) if isinstance(v, tuple)
                                                                                      else v for k, v in lavadl_opts.items()},
            "rows": rows,
            "provenance": "accuracy and activity measured in Lava 0.10 (lava-dl 0.6 netx loader, Loihi2SimCfg fixed_pt) "
                          "on this machine; energy and latency estimated from that activity by the loihi2 cost model "
                          "(Loihi 1 per-event figures, Davies et al. 2018; Loihi 2 chip facts); no Loihi was used"}


def markdown(res: dict) -> str:
    lines = [f"lava-dl SLAYER vs edgesmith conversion on Loihi 2 (Lava simulation), {res['date']}"
             + (" (quick)" if res["quick"] else ""), "",
             "| model | how | float acc | Lava acc | Lava vs ref max diff | synops / sample | messages / sample | "
             "cores | energy / sample (est.) | latency / sample (est.) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['model']} | {r['how']} | {r['float_accuracy']:.4f} | {r['lava_accuracy']:.4f} "
                     f"({r['n_samples']}) | {r['lava_vs_reference_max_abs_diff']:g} | {r['synops_per_sample']:,.0f} | "
                     f"{r['messages_per_sample']:,.0f} | {r['cores']} | {r['energy_j_per_sample'] * 1e9:,.0f} nJ | "
                     f"{r['latency_s_per_sample'] * 1e6:,.1f} us |")
    lines += ["", res["provenance"] + "."]
    return "\n".join(lines) + "\n"


def draw(res: dict):
    def _draw(folder: Path) -> list:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for r, c in zip(res["rows"], ("tab:blue", "tab:orange")):
            ax.scatter(r["energy_j_per_sample"] * 1e9, r["lava_accuracy"], s=60, color=c, label=f"{r['model']} (Lava)")
            ax.scatter(r["energy_j_per_sample"] * 1e9, r["float_accuracy"], s=60, color=c, marker="x",
                       label=f"{r['model']} (float)")
        ax.set_xlabel("energy per sample, nJ (estimated, loihi2 cost model)")
        ax.set_ylabel("test accuracy")
        ax.set_title("digits on Loihi 2 (Lava simulation)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / "comparison.png", dpi=110)
        plt.close(fig)
        return ["comparison.png"]
    return _draw


def main(argv=None) -> int:
    return claim_main(argv, __doc__, "runs/lavadl", run, markdown, draw)


if __name__ == "__main__":
    sys.exit(main())
