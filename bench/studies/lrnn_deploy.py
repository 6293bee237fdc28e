"""The sparse-LRNN paper claim (Loihi 2 vs Jetson per 8 ms step, bit-exact Lava, width x sparsity sweep): a script.

    .venv/bin/python -m edgesmith.bench.studies.lrnn_deploy --out runs/lrnn [--force] [--quick]
        [--lava-clips N] [--no-sweep | --sweep-from runs/lrnn-sweep]

Stages (each model is cached under edgesmith.common.cache_dir() by its pass, so a second run only re-scores):
  1. dense float S5 denoiser (producer ``lrnn-denoiser``);
  2. iterative magnitude pruning to 90% (ERK, cubic schedule 5%..90% of fine-tuning);
  3. quantization-aware fine-tuning (w8a16) with the masks held, then the fixed-point conversion;
  4. the Numba reference on the whole test set; Lava (Loihi2SimCfg fixed_pt) on the test clips (all by
     default, ``lava_clips`` limits it), checked bit for bit against the reference (max difference 0);
  5. estimated energy and latency per 8 ms step: Loihi 2 from the Lava activity counts, Jetson Orin
     Nano from the dense fp32 model (token-by-token, batch 1);
  6. speed of the Numba reference and of the Lava simulation in steps per second;
  7. the width x sparsity sweep (``bench/studies/lrnn_sweep.py``): Pareto PNG, iso-accuracy ratios.
Writes ``report.json``, ``report.md``, ``model.lrnn.npz``, ``model.nir`` (the float sparse model as one NIR
graph, checked on a test clip after nir.read), ``encoder.net`` / ``decoder.net`` (the dense ends as netx
networks, run in Lava against netx-ref), ``sweep.json`` and ``pareto.png`` into ``out``
atomically. Settings and timings on 2 cores: see LrnnPlan and the producer's docstring.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from edgesmith.bench.pipeline.deploy import source_artifact
from edgesmith.compress import PassContext, run_passes
from edgesmith.compress.lrnn import fixed as F
from edgesmith.compress.lrnn.train_passes import PruneLrnnConfig, QatLrnnConfig
from edgesmith.hardware import Workload, get_target
from edgesmith.hardware.workload import workload_from_activity
from edgesmith.models import get_producer
from edgesmith.common import Config, EdgesmithError, atomic_path, write_json
from edgesmith.models.lrnn.data import apply_mask, istft, si_snr, stft, stoi
from edgesmith.models.lrnn.train import score, torch_mask_fn
from edgesmith.runtimes import lrnn_ref

STEP_S = 0.008  # one STFT hop of 128 samples at 16 kHz
PAPER = {"energy_ratio": 149.0, "latency_ratio": 42.0,
         "source": "sparse-LRNN ICML 2025 paper, Loihi 2 vs Jetson Orin Nano (FP32), token-by-token, measured"}


@dataclass(frozen=True)
class LrnnPlan(Config):
    sparsity: float = 0.9
    prune_epochs: int = 10
    prune_end: float = 0.6  # final sparsity reached at 60% of fine-tuning, 40% left to recover
    qat_epochs: int = 10
    lava_clips: int | None = None  # test clips simulated in Lava (None: the whole test split)
    n_calibration: int = 32
    quick: bool = False  # tiny data and model: the test-suite version of the plan
    sweep: bool = True  # run the width x sparsity sweep (Pareto PNG, iso-accuracy) into the report
    seed: int = 0

    def validate(self) -> None:
        if not 0.0 <= self.sparsity < 1.0:
            self._fail("sparsity", f"is {self.sparsity}", "use a fraction in [0, 1).")
        if self.lava_clips is not None and self.lava_clips < 1:
            self._fail("lava_clips", f"is {self.lava_clips}", "run at least one clip in Lava, or leave it unset for all.")
        if self.prune_epochs < 1 or self.qat_epochs < 0 or self.n_calibration < 1:
            self._fail("prune_epochs", "or qat_epochs or n_calibration is out of range",
                       "use prune_epochs >= 1, qat_epochs >= 0 and n_calibration >= 1.")


def compress_models(prod, plan: LrnnPlan, log=print) -> dict:
    """Dense, 90%-sparse float and sparse QAT models, made by the prune-lrnn and qat-lrnn passes (cached
    there; the producer's module is left as it was)."""
    epochs = (1, 1) if plan.quick else (plan.prune_epochs, plan.qat_epochs)
    prune = PruneLrnnConfig(sparsity=plan.sparsity, epochs=epochs[0], end=plan.prune_end, seed=plan.seed)
    with tempfile.TemporaryDirectory() as work:
        ctx = PassContext(workdir=Path(work), train_data=prod.training_data())
        sparse, _ = run_passes(source_artifact(prod), [prune], ctx)
        qat, _ = run_passes(sparse, [QatLrnnConfig(epochs=epochs[1], seed=plan.seed)], ctx)
    log(f"pruned to {plan.sparsity:.0%} and QAT fine-tuned (or loaded from the cache)")
    return {"dense": prod.module, "sparse": sparse.module, "qat": qat.module}


def _fixed_masks(net: dict, feat: np.ndarray) -> tuple[np.ndarray, dict, float]:
    u = F.quantize_features(net, feat)
    lrnn_ref.run(net, u[0][:4])  # compile (or load the Numba cache) before timing
    t0 = time.perf_counter()
    masks, stats = lrnn_ref.run_clips(net, u)
    secs = time.perf_counter() - t0
    return masks * float(net["mask_scale"]), stats, u.shape[0] * u.shape[1] / secs


def _clip_si_snr(split, masks: np.ndarray, idx) -> tuple[np.ndarray, np.ndarray]:
    """(SI-SNR per clip, STOI per clip) of the clips ``idx`` enhanced with ``masks``."""
    spec = stft(split.noisy[idx])
    est = istft(apply_mask(spec, torch.as_tensor(masks)), split.noisy.shape[1]).numpy()
    return si_snr(est, split.clean[idx]), stoi(est, split.clean[idx])


def jetson_workload(model) -> Workload:
    """One 8 ms step of the dense fp32 model at batch 1: MACs, fp32 weights, per-step activations."""
    cfg = model.cfg
    d, n, L = cfg.d_model, cfg.modes, cfg.n_layers
    params = sum(p.numel() for p in model.parameters())
    acts = 4 * (257 + d + L * (2 * n + 4 * d) + 257)
    return Workload(macs=float(model.dense_macs_per_step()), weight_bytes=4.0 * params, activation_bytes=float(acts),
                    precision="fp32", n_layers=2 + 5 * L, batch=1,
                    source="dense fp32 S5 denoiser, one STFT frame (enc, per layer B/recurrence/C/W1/W2, dec)")


def _nir_check(model, feat: np.ndarray) -> tuple[object, dict]:
    """The float sparse model as one NIR graph, written, read back with nir.read and run on one test clip."""
    import nir

    from edgesmith.compress.lrnn.export import nir_denoiser_forward, to_nir

    graph = to_nir(model)
    with tempfile.TemporaryDirectory() as tmp:
        nir.write(f"{tmp}/m.nir", graph)
        back = nir.read(f"{tmp}/m.nir", type_check=False)
    with torch.no_grad():
        ref = model.eval()(torch.from_numpy(feat).float()[None])[0].double().numpy()
    diff = float(np.abs(nir_denoiser_forward(back, feat.astype(np.float64)) - ref).max())
    return graph, {"file": "model.nir", "nodes": len(graph.nodes), "edges": len(graph.edges),
                   "read_back_max_abs_diff_vs_model": diff, "frames": int(len(feat)),
                   "note": "ReLU, the GLU's product and sigmoid and the residual sums have no NIR node: they are named "
                           "in the graph's metadata and applied by compress/lrnn/export.nir_denoiser_forward"}


def _netx_check(model, calib: np.ndarray, test_clip: np.ndarray, folder: Path, frames: int = 40) -> dict:
    """The encoder and decoder as netx networks (``write_netx_parts``): Lava vs netx-ref on test frames."""
    from edgesmith.compress import Artifact
    from edgesmith.compress.lrnn.export import block_inputs, write_netx_parts
    from edgesmith.runtimes import get_runtime

    parts = write_netx_parts(model, calib, folder)
    _, dec_in = block_inputs(model, test_clip[None])
    for name, x in (("encoder", test_clip[:frames]), ("decoder", dec_in[:frames])):
        art = Artifact("netx", path=Path(parts[name]["path"]), meta={"input_shape": [x.shape[1]]})
        xs = np.asarray(x, np.float32)
        ref = get_runtime("netx-ref").load(art).run(xs)
        lava = get_runtime("lava").load(art).run(xs)
        parts[name].update(file=f"{name}.net", lava_frames=int(len(xs)),
                           lava_vs_reference_max_abs_diff=int(np.abs(lava.named["output_int"]
                                                                   - ref.named["output_int"]).max()))
        parts[name].pop("path")
    return parts


def run_plan(plan: LrnnPlan, log=print, netx_folder: Path | None = None) -> tuple[dict, dict, object]:
    prod = get_producer("lrnn-denoiser", seed=plan.seed, tiny=plan.quick).build()
    splits = prod.splits()
    test = splits["test"]
    models = compress_models(prod, plan, log=log)
    rows = {}
    for name, m in models.items():
        rows[name + "_float"] = score(torch_mask_fn(m), test, with_stoi=True)
    calib = prod.features("train")[: plan.n_calibration]
    net = F.convert(models["qat"], calib)
    feat = prod.features("test")
    masks, ref_stats, ref_steps_per_s = _fixed_masks(net, feat)
    rows["sparse_fixed_point"] = score(lambda f: masks, test, with_stoi=True)
    noisy = rows["dense_float"]["si_snr_noisy_db"]

    from edgesmith.runtimes.lava_lrnn_rt import run_lava

    idx = list(range(len(test) if plan.lava_clips is None else min(plan.lava_clips, len(test))))
    u = F.quantize_features(net, feat)
    lava_masks, lava_stats, max_diff = [], [], 0
    for i in idx:
        res = run_lava(net, u[i])
        ref = lrnn_ref.run(net, u[i])
        max_diff = max(max_diff, int(np.abs(res["mask"] - ref["mask"]).max()),
                       *(int(np.abs(res[k] - ref[k]).max()) for k in ("h_enc", "x", "y", "h")))
        lava_masks.append(res["mask"] * float(net["mask_scale"]))
        lava_stats.append(res["stats"])
        log(f"lava clip {i}: {res['stats']['lava_steps']} steps in {res['stats']['sim_wall_s']:.1f} s, "
            f"max |lava - ref| = {max_diff}")
    lava_snr, lava_stoi = _clip_si_snr(test, np.stack(lava_masks), idx)
    ref_snr, _ = _clip_si_snr(test, masks[idx], idx)
    rows["lava_fixed_point"] = {"si_snr_db": float(np.mean(lava_snr)), "n_clips": len(idx),
                                "stoi": float(np.nanmean(lava_stoi)),
                                "si_snr_noisy_db": float(np.mean(si_snr(test.noisy[idx], test.clean[idx]))),
                                "reference_on_same_clips_db": float(np.mean(ref_snr))}
    rows["lava_fixed_point"]["si_snr_improvement_db"] = (rows["lava_fixed_point"]["si_snr_db"]
                                                         - rows["lava_fixed_point"]["si_snr_noisy_db"])

    # --- estimated hardware figures, per 8 ms step ----------------------------------------------------
    frames = sum(s["timesteps"] for s in lava_stats)
    activity = {k: sum(s[k] for s in lava_stats) for k in ("synops", "neuron_updates", "messages", "timesteps")}
    # per Lava process (encoder, each block's x / y / h, decoder), summed over the clips: placed on cores each
    activity["per_layer"] = [{**per[0], **{k: sum(p[k] for p in per) for k in ("synops", "neuron_updates", "messages")}}
                             for per in zip(*(s["per_layer"] for s in lava_stats))]
    loihi_est = get_target("loihi2").cost_model.estimate(workload_from_activity(activity, F.weight_bytes(net)))
    jetson_est = get_target("jetson-orin-nano").cost_model.estimate(jetson_workload(models["dense"]))
    loihi = {"energy_per_step_j": loihi_est.energy_j / frames, "latency_per_step_s": loihi_est.latency_s / frames,
             "estimate": loihi_est.to_dict(),
             "activity_per_step": {k: activity[k] / frames for k in ("synops", "neuron_updates", "messages")}}
    jetson = {"energy_per_step_j": jetson_est.energy_j, "latency_per_step_s": jetson_est.latency_s,
              "estimate": jetson_est.to_dict()}
    hw = {"provenance": "estimated (cost models; no Loihi 2 or Jetson here)", "loihi2": loihi,
          "jetson_orin_nano_fp32": jetson,
          "energy_ratio_jetson_over_loihi": jetson["energy_per_step_j"] / loihi["energy_per_step_j"],
          "latency_ratio_jetson_over_loihi": jetson["latency_per_step_s"] / loihi["latency_per_step_s"],
          "paper_measured": PAPER, "real_time_budget_s": STEP_S}
    lava_sps = [s["steps_per_s"] for s in lava_stats]
    report = {
        "plan": asdict(plan), "data": asdict(prod.data_cfg), "model": prod.model_cfg.to_dict(),
        "train": asdict(prod.train_cfg), "noisy_input_si_snr_db": noisy, "results": rows,
        "bit_exact": {"clips": len(idx), "frames": frames, "max_abs_difference": max_diff,
                      "compared": "mask and every intermediate trace (h_enc, x, y, h)"},
        "sparsity": {"target": plan.sparsity, "weights": 1 - sum(int(torch.count_nonzero(p)) for _, g in
                                                                  models["qat"].prunable() for p in g)
                     / sum(p.numel() for _, g in models["qat"].prunable() for p in g)},
        "macs_per_step": {"dense": models["dense"].dense_macs_per_step(),
                          "sparse_effective": models["qat"].effective_macs_per_step()},
        "memory_bytes": {"dense_fp32": 4 * sum(p.numel() for p in models["dense"].parameters()),
                         "sparse_fixed_weights": F.weight_bytes(net)},
        "speed": {"numba_reference_steps_per_s": ref_steps_per_s, "lava_steps_per_s": float(np.mean(lava_sps)),
                  "lava_note": "Lava steps include the pipeline fill of 3 L + 2 steps per clip"},
        "overflow_int32_accumulator": ref_stats["overflow_int32_accumulator"],
        "hardware": hw,
    }
    graph, report["nir"] = _nir_check(models["qat"], feat[0])
    if netx_folder is not None:
        report["netx"] = _netx_check(models["qat"], calib, feat[0], netx_folder)
    return report, net, graph


def markdown(r: dict) -> str:
    res = r["results"]
    hw = r["hardware"]
    lines = ["# Sparse S5 denoiser: dense -> 90% sparse -> w8a16 fixed point -> Lava (Loihi 2 simulation)", "",
             f"Data: {r['data']['n_test']} test clips of {r['data']['clip_s']} s (espeak-ng speech + generated "
             f"noise at {r['data']['snrs_db']} dB). Model: d_model {r['model']['base_d_model']}x{r['model']['width']}, "
             f"{r['model']['n_layers']} layers.", "",
             "| stage | SI-SNR (dB) | improvement (dB) | STOI | clips |", "|---|---|---|---|---|",
             f"| noisy input | {r['noisy_input_si_snr_db']:.2f} | 0 | {res['dense_float'].get('stoi_noisy', float('nan')):.3f} | {res['dense_float']['n_clips']} |"]
    for key, label in (("dense_float", "dense float"), ("sparse_float", f"sparse float ({r['sparsity']['target']:.0%})"),
                       ("qat_float", "sparse QAT (fake-quant off)"), ("sparse_fixed_point", "sparse fixed point (Numba)"),
                       ("lava_fixed_point", "Lava fixed point")):
        row = res[key]
        lines.append(f"| {label} | {row['si_snr_db']:.2f} | {row['si_snr_improvement_db']:.2f} | "
                     f"{row.get('stoi', float('nan')):.3f} | {row['n_clips']} |")
    be = r["bit_exact"]
    lines += ["", f"Lava vs Numba reference: max |difference| = **{be['max_abs_difference']}** over {be['clips']} "
              f"full test clip(s), {be['frames']} frames ({be['compared']}). Lava rows are on those clips "
              f"(reference on the same clips: {res['lava_fixed_point']['reference_on_same_clips_db']:.2f} dB).", "",
              f"Speed: Numba reference {r['speed']['numba_reference_steps_per_s']:.0f} steps/s, Lava simulation "
              f"{r['speed']['lava_steps_per_s']:.1f} steps/s.", "",
              "## Estimated energy and latency per 8 ms step (ESTIMATED: cost models, not measurements)", "",
              "| platform | energy / step | latency / step |", "|---|---|---|",
              f"| Loihi 2 (fixed point, sparse, from Lava activity) | {hw['loihi2']['energy_per_step_j'] * 1e6:.2f} uJ | "
              f"{hw['loihi2']['latency_per_step_s'] * 1e6:.1f} us |",
              f"| Jetson Orin Nano (dense fp32, batch 1) | {hw['jetson_orin_nano_fp32']['energy_per_step_j'] * 1e6:.2f} uJ | "
              f"{hw['jetson_orin_nano_fp32']['latency_per_step_s'] * 1e6:.1f} us |", "",
              f"Ratio Jetson / Loihi 2: energy {hw['energy_ratio_jetson_over_loihi']:.1f}x, latency "
              f"{hw['latency_ratio_jetson_over_loihi']:.1f}x (paper, measured on hardware: 149x energy, 42x latency; "
              f"our estimate / paper: energy {hw['energy_ratio_jetson_over_loihi'] / PAPER['energy_ratio']:.1f}x, latency "
              f"{hw['latency_ratio_jetson_over_loihi'] / PAPER['latency_ratio']:.2f}x).", "",
              _placement_line(hw['loihi2']['estimate']['breakdown']), "",
              f"NIR: `model.nir` holds the float sparse model as one graph ({r['nir']['nodes']} nodes, {r['nir']['edges']} "
              f"edges); read back with nir.read it reproduces the model to {r['nir']['read_back_max_abs_diff_vs_model']:.2g} "
              f"(max |difference| of the mask logits over {r['nir']['frames']} frames).", "",
              *(f"netx: `{p['file']}` ({n}, export-netx mapping, calibration output SQNR "
                f"{p['calibration_output_sqnr_db']:.1f} dB) loads in lava-dl's netx; Lava vs netx-ref max |difference| "
                f"{p['lava_vs_reference_max_abs_diff']} over {p['lava_frames']} frames." for n, p in r.get("netx", {}).items()),
              "",
              "Coefficients and sources:", ""]
    for plat in ("loihi2", "jetson_orin_nano_fp32"):
        for c in hw[plat]["estimate"]["coefficients"]:
            lines.append(f"- {plat}: {c['name']} = {c['value']:g} {c['unit']} ({c['source']})")
    return "\n".join(lines) + "\n"


def _placement_line(bd: dict) -> str:
    cores = ", ".join(f"{p['layer']} {p['cores']}" for p in bd["placement"])
    return (f"Loihi 2 placement ({bd['placement_source']}): {bd['cores_used']} cores ({cores}); busiest core: "
            f"{bd['busiest_core_layer']}; per step {bd['time_per_step_s'] * 1e6:.1f} us of which barrier sync "
            f"{bd['barrier_s'] / bd['timesteps'] * 1e6:.2f} us.")


def deploy_lrnn(out: Path, plan: LrnnPlan = LrnnPlan(), force: bool = False, sweep_from: Path | None = None,
                log=print) -> Path:
    """Run the plan and write the report folder; ``sweep_from`` reuses a finished lrnn_sweep folder."""
    from edgesmith.bench.studies.lrnn_sweep import iso_lines, sweep_into

    out = Path(out)
    if out.exists() and not force:
        raise EdgesmithError(f"{out} already exists.", "choose another --out folder or pass --force.")
    if sweep_from is not None and not (Path(sweep_from) / "sweep.json").exists():
        raise EdgesmithError(f"{sweep_from} holds no sweep.json.", "run bench.studies.lrnn_sweep first or drop --sweep-from.")
    with tempfile.TemporaryDirectory() as parts_dir:
        report, net, graph = run_plan(plan, log=log, netx_folder=Path(parts_dir))
        parts = {n: (Path(parts_dir) / f"{n}.net").read_bytes() for n in ("encoder", "decoder")}
    with atomic_path(out, force=force) as tmp:
        tmp.mkdir(parents=True)
        for n, data in parts.items():
            (tmp / f"{n}.net").write_bytes(data)
        sweep = None
        if sweep_from is not None:
            shutil.copy(Path(sweep_from) / "sweep.json", tmp / "sweep.json")
            shutil.copy(Path(sweep_from) / "pareto.png", tmp / "pareto.png")
            sweep = json.loads((tmp / "sweep.json").read_text())
        elif plan.sweep:
            sweep = sweep_into(tmp, quick=plan.quick, log=log)
        text = markdown(report)
        if sweep is not None:
            report["sweep"] = {"file": "sweep.json", "plot": "pareto.png", "iso_accuracy": sweep["iso_accuracy"]}
            text += ("\n## Width x sparsity sweep\n\n![Pareto front](pareto.png)\n\nIso-accuracy (dense curve "
                     "interpolated in log cost at the sparse point's SI-SNR):\n\n"
                     + "\n".join(f"- {line}" for line in iso_lines(sweep) or ["no sparse point inside the dense range"])
                     + "\n")
        write_json(tmp / "report.json", report)
        (tmp / "report.md").write_text(text)
        F.save_net(net, tmp / "model.lrnn.npz")
        import nir

        nir.write(str(tmp / "model.nir"), graph)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/lrnn")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny data and model (seconds)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the width x sparsity sweep")
    ap.add_argument("--sweep-from", type=Path, default=None, help="reuse a finished lrnn_sweep folder")
    ap.add_argument("--lava-clips", type=int, default=None, help="test clips run in Lava (default: all)")
    a = ap.parse_args(argv)
    path = deploy_lrnn(Path(a.out), LrnnPlan(quick=a.quick, lava_clips=a.lava_clips, sweep=not a.no_sweep),
                       force=a.force, sweep_from=a.sweep_from)
    print((path / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
