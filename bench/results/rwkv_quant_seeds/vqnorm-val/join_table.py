"""The held-out-percentile seeds table from the two per-model sweep folders, with the KL / parity figures that
fidelity_of_cells had kept in the cells' folders when the session ran out (none are computed here)."""
import json, sys
from pathlib import Path
from edgesmith.bench.benchmarks.rwkv_quant_seeds import FIDELITY, decision_costs, markdown, percentile_choices, plot, seed_table, weight_facts, weight_kurtosis
from edgesmith.bench.benchmarks.rwkv_quant_table import write_outputs
out = Path(sys.argv[1]); dirs = [Path(d) for d in sys.argv[2:]]
reports = []
for d in dirs:
    for cell in sorted((d / "cells").iterdir()):
        r = json.loads((cell / "deploy" / "report.json").read_text())
        for field, name in FIDELITY.items():
            if (cell / name).exists():
                r[field] = json.loads((cell / name).read_text())
        if isinstance(r.get("kl_to_fp32"), dict):
            r["kl_to_fp32"] = r["kl_to_fp32"]["kl_nats_per_byte"]
        reports.append(r)
results = seed_table(reports)
costs = decision_costs(percentile_choices(reports)[0])
for res in results:
    res["decisions"] = costs.get(res["model"], [])
    res["kurtosis"] = weight_kurtosis(res["model"])
    res["weights"] = weight_facts(res["model"])
md = markdown(results)
write_outputs(out, "_".join(r["model"] for r in results), {"recipe": "bench/recipes/sweeps/rwkv-quant-seeds-vqnorm-val.toml",
              "sweep_dirs": [str(d) for d in dirs], "models": results}, md, plot(results), "dppl_vs_bpw")
print(md)
