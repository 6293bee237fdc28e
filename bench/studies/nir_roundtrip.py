"""NIR graphs on Loihi 2: an snnTorch network exported to NIR, and edgesmith's own model written to NIR and back.

    .venv/bin/python -m edgesmith.bench.studies.nir_roundtrip --out runs/nir [--force] [--quick]

1. snnTorch: a 64-64-10 ``Leaky`` network (reset to zero, 16 steps, spike-count readout) trained here on
   the 8x8 digits, exported with ``snntorch.export_nir.export_to_nir`` and written with ``nir.write``;
2. edgesmith: ``digits-mlp`` written by the ``export-nir`` pass as a rate-coded IF graph (32 steps).
Each graph goes through ``edgesmith deploy graph.nir --target loihi2``: read back with ``nir.read``, run in
float (the graph's Euler semantics: the reference), imported as Lava LIF layers, run in Lava and checked
bit for bit against ``netx-ref``. Accuracy is measured on the 360 test digits (48 with ``--quick``);
energy and latency are estimated by the loihi2 cost model from the Lava activity. Writes ``table.json``,
``table.md`` and ``accuracy_energy.png``.
"""
from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np
from edgesmith.bench.studies.claim_io import claim_main
from edgesmith.bench.pipeline.deploy import DeployOptions, deploy


def train_snntorch_digits(x_tr, y_tr, steps: int = 16, epochs: int = 15, seed: int = 0):
    """A 64-64-10 snnTorch Leaky network (reset to zero) trained on spike counts, exported with export_to_nir.

    Per-neuron beta and threshold tensors: snnTorch 1.0 exports scalar ones with shape () that nir's type
    inference rejects."""
    import snntorch as snn
    import torch
    from snntorch import utils as snn_utils
    from snntorch.export_nir import export_to_nir

    torch.manual_seed(seed)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, 64)
            self.lif1 = snn.Leaky(beta=torch.full((64,), 0.9), threshold=torch.ones(64), init_hidden=True,
                                  reset_mechanism="zero")
            self.fc2 = torch.nn.Linear(64, 10)
            self.lif2 = snn.Leaky(beta=torch.full((10,), 0.9), threshold=torch.ones(10), init_hidden=True,
                                  reset_mechanism="zero", output=True)

        def forward(self, x):
            snn_utils.reset(self)
            count = 0
            for _ in range(steps):
                spk, _ = self.lif2(self.fc2(self.lif1(self.fc1(x))))
                count = count + spk
            return count

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    x, y = torch.tensor(x_tr, dtype=torch.float32), torch.tensor(y_tr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad(), loss.backward(), opt.step()
    return net, export_to_nir(net, torch.zeros(1, 64), ignore_dims=[0])


def _row(label: str, how: str, report: dict, own_acc: float | None) -> dict:
    (lava,) = [r for r in report["results"] if r["runtime"] == "lava"]
    e = lava["energy"]
    return {"model": label, "how": how, "source_accuracy": own_acc,
            "nir_float_accuracy": report["reference"]["evaluation"]["value"],
            "lava_accuracy": lava["evaluation"]["value"], "n_samples": lava["evaluation"]["n_samples"],
            "lava_vs_netx_ref_max_abs_diff": lava["bit_exact_reference"]["max_abs_diff"],
            "synops_per_sample": lava["activity"]["synops"], "messages_per_sample": lava["activity"]["messages"],
            "timesteps_per_sample": lava["activity"]["timesteps"], "cores": e["breakdown"]["cores_used"],
            "energy_j_per_sample": e["energy_j_per_sample"], "latency_s_per_sample": e["latency_s"],
            "energy_provenance": f"estimated ({e['cost_model']})",
            "import_notes": [n for v in report["variants"] for p in v["pass_reports"] for n in p["notes"]]}


def run(quick: bool, work: Path) -> dict:
    import nir
    import torch
    from edgesmith.bench.api import quantize
    from edgesmith.models.digits import _load_digits_split

    x_tr, x_te, y_tr, y_te = _load_digits_split(0)
    n = 48 if quick else len(y_te)
    np.save(work / "cal.npy", x_tr[:128].astype(np.float32))
    np.save(work / "x.npy", x_te[:n].astype(np.float32)), np.save(work / "y.npy", y_te[:n])
    net, graph = train_snntorch_digits(x_tr, y_tr, epochs=5 if quick else 15)
    nir.write(str(work / "snntorch.nir"), graph)
    with torch.no_grad():
        snn_acc = float(np.mean(net(torch.tensor(x_te[:n], dtype=torch.float32)).argmax(1).numpy() == y_te[:n]))
    res = quantize("digits-mlp", "export-nir", out=work / "digits.nir")
    import torch as _t
    from edgesmith.models import get_producer

    mlp = get_producer("digits-mlp", seed=0).build()
    with _t.no_grad():
        fp32_acc = float(np.mean(mlp.module(_t.from_numpy(x_te[:n])).numpy().argmax(1) == y_te[:n]))
    rows = []
    for name, how, acc in (("snntorch.nir", "snnTorch Leaky 64-64-10, trained here, export_to_nir", snn_acc),
                           ("digits.nir", "digits-mlp (fp32 torch) -> edgesmith export-nir (rate-coded IF)", fp32_acc)):
        folder = deploy(DeployOptions(model=str(work / name), target="loihi2", out=work / f"r-{name}", force=True,
                                      reps=5, warmup=1, batch_sizes=(1,), progress=False,
                                      calibration_data=str(work / "cal.npy"), eval_data=str(work / "x.npy"),
                                      labels=str(work / "y.npy")))
        rows.append(_row(name, how, json.loads((folder / "report.json").read_text()), acc))
    return {"date": _dt.date.today().isoformat(), "quick": quick, "rows": rows,
            "export_nir_thresholds": res.reports[0].extra["thresholds"],
            "provenance": "accuracies measured here (source model, the NIR graph's float semantics, Lava 0.10 "
                          "Loihi2SimCfg fixed_pt); energy and latency estimated from the Lava activity by the loihi2 "
                          "cost model; no Loihi was used"}


def markdown(res: dict) -> str:
    lines = [f"NIR graphs deployed to Loihi 2 (Lava simulation), {res['date']}" + (" (quick)" if res["quick"] else ""),
             "", "| graph | made by | source model acc | NIR float acc | Lava acc | Lava vs netx-ref | synops / sample | "
             "cores | energy / sample (est.) | latency / sample (est.) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['model']} | {r['how']} | {r['source_accuracy']:.4f} | {r['nir_float_accuracy']:.4f} | "
                     f"{r['lava_accuracy']:.4f} ({r['n_samples']}) | max diff {r['lava_vs_netx_ref_max_abs_diff']:g} | "
                     f"{r['synops_per_sample']:,.0f} | {r['cores']} | {r['energy_j_per_sample'] * 1e9:,.0f} nJ | "
                     f"{r['latency_s_per_sample'] * 1e6:,.1f} us |")
    lines += ["", res["provenance"] + "."] + [f"- {r['model']}: {n}" for r in res["rows"] for n in r["import_notes"]]
    return "\n".join(lines) + "\n"


def draw(res: dict):
    def _draw(folder: Path) -> list:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for r, c in zip(res["rows"], ("tab:green", "tab:purple")):
            ax.scatter(r["energy_j_per_sample"] * 1e6, r["lava_accuracy"], color=c, s=60, label=f"{r['model']} (Lava)")
            ax.axhline(r["nir_float_accuracy"], color=c, ls=":", lw=1)
        ax.set_xlabel("energy per sample, uJ (estimated, loihi2 cost model)")
        ax.set_ylabel("test accuracy (dotted: the graph in float)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / "accuracy_energy.png", dpi=110)
        plt.close(fig)
        return ["accuracy_energy.png"]
    return _draw


def main(argv=None) -> int:
    return claim_main(argv, __doc__, "runs/nir", run, markdown, draw)


if __name__ == "__main__":
    sys.exit(main())
