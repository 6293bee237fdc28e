"""The CPU of this machine: latency is measured here, energy is estimated from a cited model.

The CPU is identified at run time from /proc/cpuinfo, and its package coefficients (TDP, cores, clock, vector
width, DRAM bandwidth) come from the profile that matches its vendor, family and model (``CPU_PROFILES``).
Cloud VMs hide the SKU: each profile names the part it assumes and why, and every estimate states it. The
development VMs were a 2-core "AMD EPYC" (family 25, model 17: Zen 4 "Genoa", assumed EPYC 9654) and then a
2-vCPU "Intel Xeon Processor" (family 6, model 207: 5th-gen "Emerald Rapids" with a 300 MB L3, assumed Xeon
Platinum 8580). A CPU no profile matches is costed with the Genoa profile, and the estimate says so.

Energy = dynamic (op and byte counts x Horowitz 45 nm per-operation energies, NOT scaled to the
real node, so this part is an overestimate) + the package-power share of the cores in use x time.
The package share uses TDP / cores, a thermal design figure rather than a measured draw: read the
static part as an upper-leaning estimate. Time is the measured latency when the workload carries
one, else a roofline over the cores in use.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from edgesmith.hardware.base import (
    Coefficient, CostModel, Estimate, Plan, PlanOptions, Target, Variant, Workload, register_target,
)
from edgesmith.common import EdgesmithError

HOROWITZ = ('M. Horowitz, "Computing\'s energy problem (and what we can do about it)", ISSCC 2014, '
            "pp. 10-14, per-operation energy table (45 nm, 0.9 V)")
EPYC_9654 = ("AMD EPYC 9654 product specifications, amd.com (4th Gen EPYC 9004 'Genoa', launched Nov 2022): "
             "96 cores, 2.4 GHz base, 360 W default TDP, 12 channels DDR5-4800")
ZEN4_SOG = ("AMD, Software Optimization Guide for the AMD Zen4 Microarchitecture (pub. 57647, 2023), "
            "floating-point unit: two 256-bit FMA pipes, 512-bit ops issued as two halves")
XEON_8580 = ("Intel Xeon Platinum 8580 Processor (300M Cache, 2.00 GHz), ark.intel.com (5th Gen Xeon Scalable "
             "'Emerald Rapids', launched Q4 2023): 60 cores, 2.0 GHz base, 350 W TDP, 8 channels DDR5-5600")
INTEL_OPT = ("Intel 64 and IA-32 Architectures Optimization Reference Manual (vol. 1, Golden Cove server core, as "
             "in Raptor Cove): two 512-bit FMA units (ports 0 and 5); AVX-512 VNNI VPDPBUSD on both")


@dataclass(frozen=True)
class CpuProfile:
    """The package figures of the part a detected CPU is assumed to be, with their sources."""

    part: str
    source: str
    vector_source: str
    assumption: str
    tdp_w: float
    cores: int
    base_clock_ghz: float
    fp32_macs_per_cycle: float
    int8_macs_per_cycle: float
    int8_note: str
    dram_bandwidth_gbs: float
    dram_note: str
    signatures: tuple = ()  # (vendor_id, cpu family, model numbers) of the CPUs costed as this part

    def matches(self, cpu: dict) -> bool:
        return any(cpu.get("vendor") == v and cpu.get("family") == f and cpu.get("model") in models
                   for v, f, models in self.signatures)


CPU_PROFILES = (
    CpuProfile("AMD EPYC 9654", EPYC_9654, ZEN4_SOG,
               "assumed SKU AMD EPYC 9654: the VM reports only the model string; the 9654 is the flagship "
               "general-purpose Zen 4 part of the reported family/model",
               360.0, 96, 2.4, 16.0, 64.0, "AVX-512 VNNI VPDPBUSD does 4 int8 products per 32-bit lane (Intel SDM "
               "vol. 2); derived: 4 x fp32 rate", 460.8, "12 x DDR5-4800 x 8 B per socket",
               signatures=(("AuthenticAMD", 25, tuple(range(0x10, 0x20))),)),
    CpuProfile("Intel Xeon Platinum 8580", XEON_8580, INTEL_OPT,
               "assumed SKU Intel Xeon Platinum 8580: the VM reports only 'Intel(R) Xeon(R) Processor'; family 6 "
               "model 207 is Emerald Rapids, and the 8580 is a general-purpose part with the 300 MB L3 the VM "
               "reports (other SKUs share it)",
               350.0, 60, 2.0, 32.0, 128.0, "2 ports x 16 lanes x 4 int8 products (VPDPBUSD zmm); AMX tiles, "
               "which onnxruntime may use for int8 GEMMs, are not counted, so an int8 roofline time is upper-leaning",
               358.4, "8 x DDR5-5600 x 8 B per socket",
               signatures=(("GenuineIntel", 6, (207,)),)),
)


def cpu_profile(cpu: dict) -> tuple[CpuProfile, str]:
    """The profile of ``cpu`` (``cpu_identity()``) and the assumption to state with its figures; a CPU no profile
    matches gets the first one, and the assumption says that it is a stand-in."""
    for profile in CPU_PROFILES:
        if profile.matches(cpu):
            return profile, profile.assumption
    stand_in = CPU_PROFILES[0]
    return stand_in, (f"no coefficient profile matches this CPU ({cpu.get('model_name')}, vendor {cpu.get('vendor')}, "
                      f"family {cpu.get('family')}, model {cpu.get('model')}): the {stand_in.part} figures stand in")


def cpu_identity(path: str = "/proc/cpuinfo") -> dict:
    """Model string, vendor, family and model number of the first CPU listed, plus the CPU count."""
    info = {"model_name": "unknown", "vendor": "unknown", "family": None, "model": None,
            "logical_cpus": os.cpu_count() or 1}
    try:
        text = Path(path).read_text()
    except OSError:
        return info
    keys = {"model name": "model_name", "vendor_id": "vendor", "cpu family": "family", "model": "model"}
    for line in text.splitlines():
        if not line.strip():
            break  # first processor block only
        key, _, value = line.partition(":")
        key = key.strip()
        if key in keys:
            value = value.strip()
            info[keys[key]] = int(value) if keys[key] in ("family", "model") and value.isdigit() else value
    return info


def last_level_cache_bytes(cpu_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Size of the CPU's last-level cache (sysfs; None where it is not exposed). A model whose bytes per token
    fit in it need not stream from DRAM at all, so its ratio to a DRAM bound says little."""
    best = None
    for index in sorted(cpu_dir.glob("index*")):
        try:
            level, size = int((index / "level").read_text()), (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        n = int(size[:-1]) * units[size[-1]] if size[-1:] in units else int(size)
        if best is None or level >= best[0]:
            best = (level, n)
    return best[1] if best else None


def physical_memory_bytes() -> int:
    """Installed RAM as the OS reports it (pages x page size)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


class HostCpuCostModel(CostModel):
    """Energy of one call from its workload and (when given) its measured latency on this CPU."""

    name = "host-cpu-horowitz45nm+tdp-share"

    def __init__(self, cores: int | None = None, cpu: dict | None = None):
        self.cores = int(cores or os.cpu_count() or 1)
        if self.cores < 1:
            raise EdgesmithError(f"cores is {cores}; it must be at least 1.", "pass the number of cores in use.")
        self.cpu = cpu if cpu is not None else cpu_identity()
        self.profile, self.assumption = cpu_profile(self.cpu)
        p, sku = self.profile, self.assumption
        self._coefficients = {c.name: c for c in (
            Coefficient("fp32_mult_pj", 3.7, "pJ", HOROWITZ, "32-bit float multiply; unscaled 45 nm value"),
            Coefficient("fp32_add_pj", 0.9, "pJ", HOROWITZ, "32-bit float add; unscaled 45 nm value"),
            Coefficient("int8_mult_pj", 0.2, "pJ", HOROWITZ, "8-bit integer multiply; int4 weights are "
                        "unpacked to int8 for the product, so int4 uses it too"),
            Coefficient("int32_add_pj", 0.1, "pJ", HOROWITZ, "32-bit integer add: the int8 dot-product "
                        "accumulator is 32-bit"),
            Coefficient("sram_read_64b_pj", 20.0, "pJ", HOROWITZ, "64-bit read from a 32 KB SRAM (the table's entry "
                        "closest to a 32-48 KB L1D); charged per activation byte / 8"),
            Coefficient("dram_read_64b_pj", 1300.0, "pJ", HOROWITZ, "64-bit DRAM read, lower end of the "
                        "1.3-2.6 nJ range (newer DRAM is cheaper); weights charged once per call"),
            Coefficient("package_tdp_w", p.tdp_w, "W", p.source, sku),
            Coefficient("cores_per_package", float(p.cores), "cores", p.source, sku),
            Coefficient("base_clock_ghz", p.base_clock_ghz, "GHz", p.source, "roofline only (no measured latency)"),
            Coefficient("fp32_macs_per_cycle", p.fp32_macs_per_cycle, "MAC/cycle/core", p.vector_source,
                        "2 FMA pipes x fp32 lanes; roofline only"),
            Coefficient("int8_macs_per_cycle", p.int8_macs_per_cycle, "MAC/cycle/core", p.vector_source,
                        f"{p.int8_note}; roofline only"),
            Coefficient("dram_bandwidth_gbs", p.dram_bandwidth_gbs, "GB/s", p.source,
                        f"{p.dram_note}; a fair per-core share is used; roofline only"),
        )}

    @property
    def coefficients(self) -> dict[str, Coefficient]:
        return self._coefficients

    def mac_pj(self, precision: str) -> tuple[float, list[str]]:
        if precision == "fp32":
            keys = ["fp32_mult_pj", "fp32_add_pj"]
        elif precision in ("int8", "int4", "fixed"):  # fixed point: 8-bit weights x 16-bit activations
            keys = ["int8_mult_pj", "int32_add_pj"]
        else:
            raise EdgesmithError(f"host-cpu has no energy model for precision {precision!r}.",
                                 "use fp32, int8 or int4 on host-cpu.")
        return sum(self.c(k) for k in keys), keys

    def roofline_s(self, work: Workload) -> tuple[float, dict]:
        """Compute- or memory-bound time of one call over the cores in use (fair bandwidth share)."""
        per_cycle = self.c("fp32_macs_per_cycle") if work.precision == "fp32" else self.c("int8_macs_per_cycle")
        peak_macs = self.cores * self.c("base_clock_ghz") * 1e9 * per_cycle
        bw = self.c("dram_bandwidth_gbs") * 1e9 * self.cores / self.c("cores_per_package")
        t_compute = (work.macs + work.synops + work.neuron_updates) * work.batch / peak_macs
        t_memory = (work.weight_bytes + work.activation_bytes * work.batch) / bw
        return max(t_compute, t_memory), {"roofline_compute_s": t_compute, "roofline_memory_s": t_memory,
                                          "bound": "compute" if t_compute >= t_memory else "memory"}

    def estimate(self, work: Workload) -> Estimate:
        mac_pj, mac_keys = self.mac_pj(work.precision)
        # a fixed-point network run on the CPU (a simulator's bit-exact twin) counts synaptic ops and neuron
        # updates: each is one integer multiply-add here
        ops = work.macs + work.synops + work.neuron_updates
        compute_j = ops * work.batch * mac_pj * 1e-12
        weight_j = work.weight_bytes / 8 * self.c("dram_read_64b_pj") * 1e-12
        act_j = work.activation_bytes * work.batch / 8 * self.c("sram_read_64b_pj") * 1e-12
        roof_s, roof = self.roofline_s(work)
        if work.measured_latency_s is not None:
            if not work.measured_latency_s > 0:
                raise EdgesmithError(f"measured latency is {work.measured_latency_s}; it must be positive.",
                                     "pass the measured wall time of one call in seconds.")
            latency, provenance = float(work.measured_latency_s), "measured (wall time on this machine)"
        else:
            latency, provenance = roof_s, "estimated (roofline over the cores in use)"
        share_w = self.c("package_tdp_w") / self.c("cores_per_package") * self.cores
        static_j = share_w * latency
        energy = compute_j + weight_j + act_j + static_j
        cpu = self.cpu
        breakdown = {
            "latency_provenance": provenance,
            "dynamic_compute_j": compute_j, "dynamic_weight_dram_j": weight_j,
            "dynamic_activation_sram_j": act_j, "static_package_share_j": static_j,
            "package_power_share_w": share_w, "cores": self.cores, "batch": work.batch,
            "energy_per_sample_j": energy / max(work.batch, 1), **roof,
            "detected_cpu": f"{cpu['model_name']} (family {cpu['family']}, model {cpu['model']})",
            "assumptions": f"{self.assumption}; Horowitz 45 nm op energies not scaled to the real node; "
                           "TDP/core share stands in for static + uncore power",
        }
        keys = mac_keys + ["dram_read_64b_pj", "sram_read_64b_pj", "package_tdp_w", "cores_per_package"]
        if work.measured_latency_s is None:
            keys += ["base_clock_ghz", "fp32_macs_per_cycle" if work.precision == "fp32" else "int8_macs_per_cycle",
                     "dram_bandwidth_gbs"]
        return Estimate(energy_j=energy, latency_s=latency, breakdown=breakdown, coefficients=self.used(*keys),
                        model=self.name)


def select_variants(target: str, variants: list[Variant], wanted, unavailable: dict[str, str] | None = None
                    ) -> list[Variant]:
    """The variants named in ``wanted`` (all when empty), in the target's order.

    ``unavailable`` maps names the target knows but did not build under these options to a fix.
    """
    if not wanted:
        return variants
    unavailable = unavailable or {}
    offered = {v.name for v in variants}
    for name in wanted:
        if name in offered:
            continue
        if name in unavailable:
            raise EdgesmithError(f"variant {name!r} is not available on {target} with these options.",
                                 unavailable[name])
        known = sorted(offered | set(unavailable))
        raise EdgesmithError(f"{target} has no variant {name!r}.", f"use one of: {', '.join(known)}.")
    return [v for v in variants if v.name in set(wanted)]


def given_variant(producer, export: list, runtimes: list, description: str) -> Variant:
    """The uncompressed variant: "fp32", or "given" for a model that arrives quantized (``given_precision``),
    measured as it is."""
    held = getattr(producer, "given_precision", None)
    if held:
        return Variant("given", export, runtimes, f"the model as given, already {held}")
    return Variant("fp32", export, runtimes, description)


def onnx_export(producer) -> list:
    """The pass that turns the producer's model into ONNX: none when it already is ONNX."""
    from edgesmith.compress.export_onnx import ExportOnnxConfig

    return [] if producer.native_format == "onnx" else [ExportOnnxConfig()]


def check_exclude(producer, kopts) -> None:
    """Names given to ``exclude`` that a user's ONNX file lacks are refused before any work; a torch model's node names
    exist only once it is exported, so its int8 or int4 pass checks them."""
    if not kopts.exclude or getattr(producer, "native_format", None) != "onnx" or getattr(producer, "path", None) is None:
        return
    import onnx

    from edgesmith.compress.onnx_analysis import check_node_names

    check_node_names(onnx.load(str(producer.path), load_external_data=False), kopts.exclude, "--option exclude")


def int8_config(kopts):
    """The int8 QDQ pass a tensor model's options ask for (host-cpu and the Jetson build the same one). Layers excluded
    by name: a variant whose every layer is excluded is built as asked and reports 0 quantized."""
    from edgesmith.compress.quant_int8 import Int8QdqConfig
    from edgesmith.models.kinds.tensor import INT8_WEIGHT_OP_TYPES

    auto = tuple(kopts.int8_op_types) == ("auto",)  # --option int8_op_types=auto: both sets, the closer one kept
    return Int8QdqConfig(calibration=kopts.calibration, percentile=kopts.percentile,
                         op_types=INT8_WEIGHT_OP_TYPES if auto else tuple(kopts.int8_op_types), choose_op_types=auto,
                         exclude=tuple(kopts.exclude), allow_empty=bool(kopts.exclude))


def exclude_notes(kopts, variants) -> list[str]:
    """What ``--option exclude=[...]`` did: the post-training variants keep those nodes in fp32; QAT variants, which
    quantize the torch model's Linear layers, do not read ONNX node names."""
    if not kopts.exclude:
        return []
    out = [f"kept in fp32 by exclude in the post-training variants: {', '.join(kopts.exclude)}"]
    qat = [v.name for v in variants if v.name.startswith("qat-")]
    if qat:
        out.append(f"exclude names ONNX nodes and does not apply to {', '.join(qat)}, which quantize every Linear of the "
                   "torch model (qat_keep_8bit keeps the most sensitive at 8 bits)")
    return out


def qat_variants(producer, kopts, options: PlanOptions, runtimes: list[str], where: str,
                 form: str = "qcdq") -> tuple[list, dict[str, str]]:
    """Brevitas QAT variants (qat-w8a8, qat-w4a8), ``kopts.qat_epochs`` of fine-tuning, exported in ``form``, for
    a torch model whose producer offers training data; else none, with the reason for each (reported as unavailable)."""
    from edgesmith.compress.qat_brevitas import QatW4A8Config, QatW8A8Config
    from edgesmith.compress.torch_source import TorchSourceConfig

    names = ("qat-w8a8", "qat-w4a8")
    why = qat_unavailable(producer, kopts, options)
    if why:
        return [], {n: why for n in names}
    back = [TorchSourceConfig()] if producer.native_format == "onnx" else []  # the export's torch module
    epochs = int(kopts.qat_epochs)
    return [Variant("qat-w8a8", back + [QatW8A8Config(epochs=epochs, form=form)], list(runtimes),
                    f"brevitas QAT, 8-bit weights and inputs, QCDQ ONNX ({where})"),
            Variant("qat-w4a8", back + [QatW4A8Config(epochs=epochs, form=form, keep_8bit=kopts.qat_keep_8bit)],
                    list(runtimes),
                    f"brevitas QAT, 4-bit weights (per channel){_kept(kopts.qat_keep_8bit)}, 8-bit inputs, QCDQ ONNX "
                    f"({where})")], {}


def qat_unavailable(producer, kopts, options: PlanOptions) -> str | None:
    """Why QAT variants cannot be offered for ``producer`` (None when they can): no epochs asked for, no torch
    module behind the model, or no data to fine-tune on."""
    from edgesmith.compress.torch_source import torch_source
    from edgesmith.models.base import Producer

    if not kopts.qat_epochs:
        return "set --option qat_epochs=3 (or more) to fine-tune the QAT variants."
    if torch_source(producer) is None:
        return (f"QAT fine-tunes a torch model; this one is {producer.native_format} with no torch module behind it "
                "(deploy its torch form, path/to/file.py:factory).")
    own = options.training_given or type(producer).training_data is not Producer.training_data
    if not own and producer.calibration_data(1) is None:
        return (f"{getattr(producer, 'name', 'this model')} offers no training data to fine-tune on: pass --train-data "
                "(inputs, labels inside) or --calibration-data (QAT then distils the float model on it).")
    return None


def _kept(n: int) -> str:
    return f" but the {n} most sensitive layer(s) at 8 bits" if n else ""


def asked_variants(hints: dict, options: PlanOptions) -> dict:
    """The variants ruled out that the user did not leave out anyway (all of them when no --variant was given)."""
    return {n: w for n, w in hints.items() if not options.variants or n in options.variants}


def module_fits(target: Target, producer) -> None:
    """Refuse a plan whose fp32 model exceeds the target's memory (only when the model is built)."""
    module = getattr(producer, "module_", None)
    if module is not None:
        size = sum(t.numel() * t.element_size() for t in module.state_dict().values())
        target.check_fits(int(size), f"{getattr(producer, 'name', 'the model')} (fp32)")


_CPU = cpu_identity()


@register_target
class HostCpu(Target):
    name = "host-cpu"
    description = (f"this machine's CPU ({_CPU['model_name']}, {_CPU['logical_cpus']} logical CPUs), "
                   "onnxruntime or TVM; latency measured here, energy estimated unless RAPL is present")
    numeric_formats = ("fp32", "int8", "int4")
    memory_budget_bytes = physical_memory_bytes()
    memory_budget_source = "physical RAM read from the OS at run time (sysconf SC_PHYS_PAGES x SC_PAGE_SIZE)"
    runtime = "onnxruntime"
    export_format = "onnx"
    latency_provenance = "measured"

    def __init__(self, cores: int | None = None):
        self._cost_model = HostCpuCostModel(cores, _CPU)

    @property
    def cost_model(self) -> CostModel:
        return self._cost_model

    def describe(self) -> dict:
        d = super().describe()
        d["detected_cpu"] = {k: v for k, v in _CPU.items()}
        d["cost_profile"] = {"part": self._cost_model.profile.part, "assumption": self._cost_model.assumption}
        d["runtimes"] = ["onnxruntime", "tvm"]
        return d

    def plan_tensor(self, producer, options: PlanOptions, kopts) -> Plan:
        from edgesmith.compress.prune import MagnitudePruneConfig
        from edgesmith.compress.quant_int4 import Int4WeightOnlyConfig

        module_fits(self, producer)
        check_exclude(producer, kopts)
        skip = producer.unsupported_runtimes() if hasattr(producer, "unsupported_runtimes") else {}
        skip = {name: why for name, why in skip.items() if name != self.runtime}
        both = ["onnxruntime", "tvm"] if options.wants_tvm and "tvm" not in skip else ["onnxruntime"]
        export = onnx_export(producer)
        variants = [
            given_variant(producer, export, list(both), "fp32 ONNX" + (" export" if export else " (the model as given)")),
            Variant("int8", export + [int8_config(kopts)], list(both), "int8 QDQ static quantization"),
            Variant("int4", export + [Int4WeightOnlyConfig(block_size=kopts.int4_block_size, gemm_as_matmul=kopts.int4_gemm,
                                                             exclude=tuple(kopts.exclude), allow_empty=bool(kopts.exclude))],
                    ["onnxruntime"], "4-bit weight-only MatMulNBits (TVM cannot run MatMulNBits)"),
        ]
        qat, unavailable = qat_variants(producer, kopts, options, ["onnxruntime"], "Linear layers lowered to onnxruntime's integer "
                                          "MatMulIntegerToFloat", form="ort-integer")
        variants += qat
        hints = dict(producer.unsupported_formats()) if hasattr(producer, "unsupported_formats") else {}
        hints = {n: why for n, why in hints.items() if any(v.name == n for v in variants)}  # this target's variants
        layers = getattr(producer, "int4_layers", None)
        if not kopts.int4_gemm and layers and not layers["matmul"] and "int4" not in hints:
            hints["int4"] = f"its {layers['gemm']} weight layer(s) are Gemm, which int4_gemm=false keeps in fp32"
        for name, why in hints.items():
            unavailable[name] = f"{getattr(producer, 'name', 'this model')} has no {name} variant: {why}"
        variants = [v for v in variants if v.name not in hints]
        if kopts.prune_sparsity > 0 and producer.native_format != "torch":
            unavailable["pruned"] = "magnitude pruning works on a torch model; this one is ONNX."
        elif kopts.prune_sparsity > 0:
            variants.append(Variant(
                "pruned", [MagnitudePruneConfig(sparsity=kopts.prune_sparsity), *onnx_export(producer), int8_config(kopts)],
                list(both), f"magnitude-pruned to {kopts.prune_sparsity:.0%} sparsity, then int8 QDQ"))
        else:
            unavailable["pruned"] = "set a prune sparsity above 0 (e.g. --option prune_sparsity=0.5)."
        notes = ["latency and memory are measured on this machine; energy is measured with RAPL where the "
                 "powercap interface exists, otherwise estimated by the host-cpu cost model"]
        if options.tvm is False:
            notes.append("TVM disabled by option")
        elif not options.wants_tvm:
            notes.append("TVM rows only when asked: --tvm (untuned), --tvm-records, --tvm-tune-trials N")
        notes += exclude_notes(kopts, variants)
        notes += [f"variant {name} not built: {why}" for name, why in hints.items()]
        notes += [f"runtime {name} left out for this model: {why}" for name, why in skip.items()]
        return Plan(self.name, select_variants(self.name, variants, options.variants, unavailable),
                    self.latency_provenance, notes, not_built=asked_variants(hints, options))

    def plan_tree_policy(self, producer, options: PlanOptions, kopts) -> Plan:
        """The Numba engine itself, its ONNX TreeEnsemble export in onnxruntime and its C export as a .so."""
        from edgesmith.compress.export_trees import ExportTreeCConfig, ExportTreeOnnxConfig

        variants = [
            Variant("trees", [], ["trees"], "the Numba tree engine (native form)"),
            Variant("onnx", [ExportTreeOnnxConfig()], ["onnxruntime"], "ONNX TreeEnsemble (ai.onnx.ml)"),
            Variant("c", [ExportTreeCConfig(leaves=kopts.c_leaves)], ["c"],
                    f"C source, {kopts.c_leaves} leaves, compiled with gcc into a shared library"),
        ]
        return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance,
                    ["every row is timed in a fresh process; the c row calls the compiled .so through ctypes"])

    planners = {"tensor": plan_tensor, "tree-policy": plan_tree_policy}  # token-lm, stream: hardware/families/
