"""NVIDIA Jetson Orin Nano 8GB: no device here, so latency and energy are estimated.

onnxruntime runs the exported model on this machine only as a numerical proxy for the Jetson's
outputs (same graph, same arithmetic class); its wall time says nothing about the Jetson.

Latency = layers x kernel-launch overhead + max(MACs / peak MAC rate of the precision,
bytes moved / LPDDR5 bandwidth): a roofline with a fixed per-layer cost.

Energy = module power mode x latency. NVIDIA publishes module power budgets (7 W / 15 W modes)
but no per-operation energies for Orin; a per-op model built from 45 nm figures would misstate
an 8 nm SoC, while the power mode is the budget the module's DVFS holds under load, so power x time
is an upper-leaning estimate that already contains static, CPU and DRAM power.
"""
from __future__ import annotations

import dataclasses

from edgesmith.hardware.base import Coefficient, CostModel, Estimate, Plan, PlanOptions, Target, Variant, Workload, register_target
from edgesmith.hardware.host_cpu import (asked_variants, check_exclude, exclude_notes, given_variant, int8_config,
                                         module_fits, onnx_export,
                                         qat_variants, select_variants)
from edgesmith.common import EdgesmithError

DATASHEET = ("NVIDIA Jetson Orin Nano Series Module Data Sheet (DS-11105-001, 2023), Orin Nano 8GB: "
             "1024 CUDA cores, 32 Tensor cores, GPU max 625 MHz, 40 sparse / 20 dense INT8 TOPS, "
             "8 GB 128-bit LPDDR5 68 GB/s, 7 W-15 W power modes")
A100_WP = ("NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), peak table: dense FP16 tensor "
           "312 TFLOPS vs INT8 624 TOPS, i.e. Ampere tensor-core FP16 runs at half the INT8 rate")
LAUNCH = ("CUDA.jl documentation, 'Graphs' (cuda.juliagpu.org/dev/usage/graphs): a 4-layer MLP at batch 16 "
          "(8 kernels) takes about 50 us launched kernel by kernel vs 16 us as one CUDA graph, i.e. roughly "
          "4-6 us per kernel launch")


class JetsonOrinNanoCostModel(CostModel):
    name = "jetson-orin-nano-roofline+power-mode"

    def __init__(self):
        self._coefficients = {c.name: c for c in (
            Coefficient("fp32_peak_macs_per_s", 1024 * 625e6, "MAC/s", DATASHEET,
                        "derived: 1024 CUDA cores x 625 MHz x 1 FMA per core per cycle"),
            Coefficient("fp16_peak_macs_per_s", 5.0e12, "MAC/s", DATASHEET + "; " + A100_WP,
                        "derived: half the dense INT8 rate (10e12 MAC/s) on the tensor cores"),
            Coefficient("int8_peak_macs_per_s", 10.0e12, "MAC/s", DATASHEET,
                        "derived: 20 dense INT8 TOPS / 2 ops per MAC"),
            Coefficient("dram_bandwidth_bps", 68e9, "B/s", DATASHEET,
                        "15 W mode; the 25 W 'Super' mode (JetPack 6.2) raises it to 102 GB/s"),
            Coefficient("kernel_launch_s", 5e-6, "s/layer", LAUNCH,
                        "one fused kernel per MAC layer assumed; measured on a desktop GPU, the Jetson's "
                        "ARM host may be slower"),
            Coefficient("module_power_w", 15.0, "W", DATASHEET, "top power mode of the 8GB module "
                        "(original JetPack 5 limits); energy = this x latency"),
        )}

    @property
    def coefficients(self) -> dict[str, Coefficient]:
        return self._coefficients

    def estimate(self, work: Workload) -> Estimate:
        key = {"fp32": "fp32_peak_macs_per_s", "fp16": "fp16_peak_macs_per_s", "int8": "int8_peak_macs_per_s"}
        if work.precision not in key:
            raise EdgesmithError(f"jetson-orin-nano has no {work.precision!r} arithmetic in this model.",
                                 "use an fp32, fp16 or int8 variant for the Jetson.")
        # a streaming workload runs its timesteps one after another: each step launches every layer and
        # reads the weights again; MACs and activations are totals over the steps
        steps = max(int(work.timesteps), 1)
        t_compute = work.macs * work.batch / self.c(key[work.precision])
        bytes_moved = steps * work.weight_bytes + work.activation_bytes * work.batch
        t_memory = bytes_moved / self.c("dram_bandwidth_bps")
        t_launch = steps * work.n_layers * self.c("kernel_launch_s")
        latency = t_launch + steps * max(t_compute / steps, t_memory / steps)
        energy = self.c("module_power_w") * latency
        breakdown = {
            "latency_provenance": "estimated (roofline + per-layer launch overhead; no Jetson here)",
            "compute_s": t_compute, "memory_s": t_memory, "launch_s": t_launch,
            "bound": "compute" if t_compute >= t_memory else "memory", "bytes_moved": bytes_moved,
            "batch": work.batch, "timesteps": steps, "energy_per_sample_j": energy / max(work.batch, 1),
            "energy_method": "module power mode x latency",
        }
        return Estimate(energy_j=energy, latency_s=latency, breakdown=breakdown, model=self.name,
                        coefficients=self.used(key[work.precision], "dram_bandwidth_bps", "kernel_launch_s",
                                               "module_power_w"))


@register_target
class JetsonOrinNano(Target):
    name = "jetson-orin-nano"
    description = ("NVIDIA Jetson Orin Nano 8GB (Ampere GPU, 1024 CUDA cores); not attached: onnxruntime "
                   "runs the export here only as a numerical proxy, latency and energy are estimated")
    numeric_formats = ("fp32", "fp16", "int8")
    memory_budget_bytes = 8 * 2**30
    memory_budget_source = DATASHEET + " (8 GB shared by CPU and GPU)"
    runtime = "onnxruntime"
    export_format = "onnx"
    latency_provenance = "estimated"
    refused_kinds = {"tree-policy": "no tree-ensemble kernel for its GPU is modelled here (the ONNX TreeEnsemble "
                                    "operator would run on its ARM CPU, which this cost model does not describe)"}

    def __init__(self):
        self._cost_model = JetsonOrinNanoCostModel()

    @property
    def cost_model(self) -> CostModel:
        return self._cost_model

    def plan_tensor(self, producer, options: PlanOptions, kopts) -> Plan:
        """fp32, fp16 and int8 in TensorRT's forms; the files run here in onnxruntime to be scored."""
        from edgesmith.compress.quant_fp16 import Fp16Config

        module_fits(self, producer)
        check_exclude(producer, kopts)
        export = onnx_export(producer)
        variants = [
            given_variant(producer, export, ["onnxruntime"], "fp32 ONNX (CUDA cores on the Jetson)"),
            Variant("fp16", export + [Fp16Config()], ["onnxruntime"],
                    "fp16 ONNX, inputs and outputs fp32 (tensor cores on the Jetson, twice the fp32 rate)"),
            Variant("int8", export + [tensorrt_int8(int8_config(kopts))], ["onnxruntime"],
                    "int8 as TensorRT's explicit quantization takes it: symmetric int8 activations and full-range "
                    "per-channel int8 weights, Q/DQ before each quantized layer (tensor cores on the Jetson)"),
        ]
        qat, unavailable = qat_variants(producer, kopts, options, ["onnxruntime"], "int8 tensor cores on the Jetson")
        variants += qat
        hints = producer.unsupported_formats() if hasattr(producer, "unsupported_formats") else {}
        hints = {n: why for n, why in hints.items() if any(v.name == n for v in variants)}  # this target's variants
        unavailable.update({n: f"{producer.name} has no {n} variant: {why}" for n, why in hints.items()})
        variants = [v for v in variants if v.name not in hints]
        return Plan(self.name, select_variants(self.name, variants, options.variants, unavailable),
                    self.latency_provenance, PROXY_NOTES + exclude_notes(kopts, variants)
                    + [f"variant {n} not built: {w}" for n, w in hints.items()], not_built=asked_variants(hints, options))

    def plan_token_lm(self, producer, options: PlanOptions, kopts) -> Plan:
        from edgesmith.compress.export_step import ExportStepOnnxConfig

        module_fits(self, producer)
        variants = [Variant("fp32", [ExportStepOnnxConfig()], ["onnxruntime"],
                            "fp32 step graph (state in, state out), one token per step on the CUDA cores")]
        return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance,
                    PROXY_NOTES + ["per-token latency: one step graph call (its MACs and weight bytes) per token"])

    def plan_stream(self, producer, options: PlanOptions, kopts) -> Plan:
        module_fits(self, producer)
        variants = [Variant("dense", [], ["torch"], "the dense float model, frame by frame (batch 1)")]
        return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance,
                    ["torch on this machine is a numerical proxy for the Jetson's outputs only",
                     "latency and energy come from the jetson-orin-nano cost model, one kernel launch per layer "
                     "and frame (the model runs frame by frame, as a streaming model must)"])

    planners = {"tensor": plan_tensor, "token-lm": plan_token_lm, "stream": plan_stream}


PROXY_NOTES = ["onnxruntime on this machine is a numerical proxy for the Jetson's outputs only",
               "latency and energy come from the jetson-orin-nano cost model (estimated)"]


def tensorrt_int8(config):
    """An int8 QDQ pass in the form TensorRT builds engines from (its explicit-quantization rules): activations int8 with
    zero point 0, weights symmetric per output channel over the full int8 range (no 7-bit weights: those are an x86
    CPU kernel's need, not the Jetson's)."""
    return dataclasses.replace(config, activations="int8", symmetric_activations=True, reduce_range=False)
