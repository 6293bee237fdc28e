"""Intel Loihi 2: a Sigma-Delta network simulated in Lava; latency and energy from activity counts,
with the network's layers mapped onto the chip's 128 neurocores.

Intel publishes no per-operation energy or timing table for Loihi 2 (it measures with on-chip
probes), so the per-event figures here are Loihi 1's pre-silicon numbers (Davies et al. 2018).
Loihi 2 is built in Intel 4 rather than 14 nm, so treat these as conservative stand-ins. The chip
facts (128 neurocores, 192 KB of memory per core, up to 8,192 neurons per core, about 1 W) are Loihi 2's.

Core mapping (``place``). Each layer is one Lava process and gets cores of its own, as Lava's
compiler places processes: ``ceil(memory / 192 KB)`` cores, more if it has over 8,192 neurons, its
neurons (and their incoming synapses) split evenly. A layer's memory is its synapses (8-bit weights:
1 byte each stored densely, or 2 bytes per nonzero stored sparsely with an 8-bit index, whichever is
smaller) plus 12 bytes of state per Sigma-Delta neuron (24-bit sigma, activation and residue, 16-bit
bias, 8-bit threshold mantissa). Without per-layer counts (old reports) the network is one layer
sized by its weight bytes.

Time and energy, from a run of T steps with S synaptic ops, U neuron updates and M messages:
  per core c: work_c = sum over its layer shares of (S_l x t_synop + U_l x t_update) / cores_l
  time   = T x barrier sync + max_c work_c          (cores work in parallel; the busiest sets the pace)
  energy = S x e_synop + U x e_update + M x e_message + chip power x cores_used/128 x time
The busiest core's work is spread evenly over the steps (steady streaming); dynamic energy is linear
in each count; static power is charged only to the cores in use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from edgesmith.hardware.base import Coefficient, CostModel, Estimate, Plan, PlanOptions, Target, Variant, Workload, register_target
from edgesmith.hardware.host_cpu import select_variants
from edgesmith.common import EdgesmithError

DAVIES = ('M. Davies et al., "Loihi: A Neuromorphic Manycore Processor with On-Chip Learning", IEEE Micro '
          "38(1):82-99, 2018, Table 2 (Loihi 1, 14 nm, pre-silicon figures)")
LOIHI2_BRIEF = ('Intel Labs, "Taking Neuromorphic Computing to the Next Level with Loihi 2", technology brief, '
                "2021: 128 neuromorphic cores, up to 192 KB of flexibly partitioned memory per core, "
                "1M neurons / 120M synapses per chip")
LOIHI2_POWER = ("Intel Labs Loihi 2 technology brief (2021) as summarised by open-neuromorphic.org "
                "'Loihi 2 - Intel' hardware page: about 1 W per chip")
LOIHI1_NOTE = "Loihi 1 figure: no public per-op table exists for Loihi 2"

N_CORES = 128
CORE_MEMORY_BYTES = 192 * 1024
NEURONS_PER_CORE = 8192  # 1M neurons per chip / 128 cores (Loihi 2 brief)
NEURON_STATE_BYTES = 12  # Sigma-Delta neuron: 24-bit sigma, act and residue, 16-bit bias, 8-bit vth mantissa
SPARSE_SYNAPSE_BYTES = 2  # 8-bit weight + 8-bit index per stored nonzero (sparse synapse encoding)
DENSE_SYNAPSE_BYTES = 1


@dataclass(frozen=True)
class CoreShare:
    layer: str
    cores: int  # how many cores this layer is split over (each holds 1/cores of it)
    memory_bytes: float  # per core
    neurons: float  # per core
    synops: float  # per core, per sample
    neuron_updates: float  # per core, per sample


def layer_memory(layer: dict) -> tuple[float, str]:
    """(bytes of synapses plus neuron state, the synapse encoding chosen) for one layer."""
    dense = layer.get("dense_synapses", layer["synapses"]) * DENSE_SYNAPSE_BYTES
    sparse = layer["synapses"] * SPARSE_SYNAPSE_BYTES
    syn, enc = (dense, "dense") if dense <= sparse else (sparse, "sparse")
    return syn + layer["neurons"] * NEURON_STATE_BYTES, enc


class Loihi2CostModel(CostModel):
    name = "loihi2-cores(davies2018-loihi1-figures)"

    def __init__(self):
        self._coefficients = {c.name: c for c in (
            Coefficient("synop_energy_pj", 23.6, "pJ", DAVIES, "energy per synaptic spike op (min); "
                        + LOIHI1_NOTE),
            Coefficient("neuron_update_energy_pj", 81.0, "pJ", DAVIES, "energy per active neuron update; "
                        + LOIHI1_NOTE + "; the same value is used by keras-spiking's ModelEnergy"),
            Coefficient("message_energy_pj", 1.7, "pJ", DAVIES, "within-tile spike energy; mesh hops "
                        "(3-4 pJ each) are left out because placement is unknown, so this is a lower bound; "
                        + LOIHI1_NOTE),
            Coefficient("synop_time_ns", 3.5, "ns", DAVIES, "time per synaptic spike op (max); " + LOIHI1_NOTE),
            Coefficient("neuron_update_time_ns", 8.4, "ns", DAVIES, "time per active neuron update; "
                        + LOIHI1_NOTE),
            Coefficient("barrier_sync_ns", 465.0, "ns", DAVIES, "mesh-wide barrier sync, 32-tile end of the "
                        "113-465 ns range (SANA-FE's loihi.yaml uses 299 ns); once per time step; " + LOIHI1_NOTE),
            Coefficient("chip_power_w", 1.0, "W", LOIHI2_POWER, "chip-level figure, charged pro rata to the "
                        "cores in use as static power"),
            Coefficient("neurocores", float(N_CORES), "cores", LOIHI2_BRIEF),
            Coefficient("core_memory_bytes", float(CORE_MEMORY_BYTES), "B", LOIHI2_BRIEF,
                        "synapses, neuron state and routing share it; routing tables are not counted"),
            Coefficient("neurons_per_core", float(NEURONS_PER_CORE), "neurons", LOIHI2_BRIEF,
                        "1M neurons per chip over 128 cores"),
            Coefficient("neuron_state_bytes", float(NEURON_STATE_BYTES), "B",
                        "edgesmith assumption (no public figure), after the state variables of lava-nc 0.10's SigmaDelta",
                        "Sigma-Delta neuron state: 24-bit sigma, activation and residue, 16-bit bias, 8-bit "
                        "threshold mantissa; Intel does not publish the per-neuron memory layout"),
            Coefficient("sparse_synapse_bytes", float(SPARSE_SYNAPSE_BYTES), "B",
                        "edgesmith assumption (no public figure for Loihi 2's sparse synapse encoding)",
                        "8-bit weight plus an 8-bit index per stored nonzero synapse"),
        )}

    @property
    def coefficients(self) -> dict[str, Coefficient]:
        return self._coefficients

    def layers_of(self, work: Workload) -> list[dict]:
        if work.layers:
            return [dict(layer) for layer in work.layers]
        # no per-layer counts: the whole network as one layer whose memory is its weight bytes
        return [{"name": "network", "neurons": 0.0, "synapses": float(work.weight_bytes),
                 "dense_synapses": float(work.weight_bytes), "synops": work.synops,
                 "neuron_updates": work.neuron_updates, "messages": work.messages}]

    def place(self, work: Workload) -> list[CoreShare]:
        """One entry per layer: how many cores it takes and what each of them holds and does per sample."""
        shares = []
        mem_cap, neuron_cap = self.c("core_memory_bytes"), self.c("neurons_per_core")
        for layer in self.layers_of(work):
            mem, _ = layer_memory(layer)
            cores = max(1, math.ceil(mem / mem_cap - 1e-12), math.ceil(layer["neurons"] / neuron_cap - 1e-12))
            shares.append(CoreShare(layer["name"], cores, mem / cores, layer["neurons"] / cores,
                                    layer["synops"] / cores, layer["neuron_updates"] / cores))
        total = sum(s.cores for s in shares)
        if total > self.c("neurocores"):
            raise EdgesmithError(
                f"the network needs {total} neurocores ({', '.join(f'{s.layer}: {s.cores}' for s in shares)}) "
                f"but one Loihi 2 chip has {int(self.c('neurocores'))}.",
                "prune or shrink the model so it fits one chip.")
        return shares

    def cores_used(self, work: Workload) -> int:
        return sum(s.cores for s in self.place(work))

    def estimate(self, work: Workload) -> Estimate:
        if work.precision != "fixed":
            raise EdgesmithError(f"loihi2 runs fixed-point networks, not {work.precision!r}.",
                                 "build the workload from Lava activity (workload_from_activity).")
        shares = self.place(work)
        cores = sum(s.cores for s in shares)
        work_s = [(s.synops * self.c("synop_time_ns") + s.neuron_updates * self.c("neuron_update_time_ns")) * 1e-9
                  for s in shares]
        busiest = max(range(len(shares)), key=lambda i: work_s[i])
        # counts are per sample; a batch streams through the chip sample after sample (time multiplexing)
        b = max(int(work.batch), 1)
        timesteps, synops = work.timesteps * b, work.synops * b
        updates, messages = work.neuron_updates * b, work.messages * b
        barrier_s = timesteps * self.c("barrier_sync_ns") * 1e-9
        compute_s = work_s[busiest] * b
        latency = barrier_s + compute_s
        synop_j = synops * self.c("synop_energy_pj") * 1e-12
        update_j = updates * self.c("neuron_update_energy_pj") * 1e-12
        message_j = messages * self.c("message_energy_pj") * 1e-12
        static_w = self.c("chip_power_w") * cores / self.c("neurocores")
        static_j = static_w * latency
        energy = synop_j + update_j + message_j + static_j
        breakdown = {
            "latency_provenance": "estimated (activity counts x per-event times on the busiest core; no Loihi here)",
            "cores_used": cores, "batch": b, "timesteps": timesteps,
            "barrier_s": barrier_s, "compute_s": compute_s, "time_per_step_s": latency / timesteps,
            "busiest_core_layer": shares[busiest].layer,
            "placement": [{"layer": s.layer, "cores": s.cores, "memory_bytes_per_core": round(s.memory_bytes),
                           "neurons_per_core": s.neurons, "work_s_per_core_per_sample": w}
                          for s, w in zip(shares, work_s)],
            "placement_source": "per-layer counts from the run" if work.layers else
                                "whole network as one layer (no per-layer counts)",
            "synop_j": synop_j, "neuron_update_j": update_j, "message_j": message_j,
            "static_j": static_j, "static_power_w": static_w,
            "note": "per-event energies and times are Loihi 1 figures (Davies et al. 2018): Intel publishes "
                    "no per-operation table for Loihi 2; chip facts (cores, memory, neurons per core, ~1 W) are "
                    "Loihi 2's",
        }
        return Estimate(energy_j=energy, latency_s=latency, breakdown=breakdown, model=self.name,
                        coefficients=list(self.coefficients.values()))


@register_target
class Loihi2(Target):
    name = "loihi2"
    description = ("Intel Loihi 2 neuromorphic chip (128 neurocores); not attached: the sigma-delta network "
                   "runs in Lava's fixed-point simulator and latency/energy are estimated from its activity")
    numeric_formats = ("fixed",)  # int8 weights, states up to 24 bits, graded spikes up to 24 bits
    memory_budget_bytes = N_CORES * CORE_MEMORY_BYTES
    memory_budget_source = LOIHI2_BRIEF + " (128 x 192 KB)"
    runtime = "lava"
    export_format = "netx"
    latency_provenance = "estimated"
    source_formats = ("torch", "onnx", "netx", "nir")
    refused_kinds = {
        "token-lm": "its recurrent state update multiplies activations by activations (a time mix) and its "
                    "output is a softmax over the vocabulary; neither maps to sigma-delta neurons here",
        "tree-policy": "a tree ensemble is comparisons and table lookups, not synaptic integration: there is no "
                       "Lava mapping for it",
    }

    def __init__(self):
        self._cost_model = Loihi2CostModel()

    @property
    def cost_model(self) -> CostModel:
        return self._cost_model

    def describe(self) -> dict:
        d = super().describe()
        d["numeric_format_detail"] = "int8 weights, neuron states up to 24 bits, graded spikes up to 24 bits"
        return d

    def plan_tensor(self, producer, options: PlanOptions, kopts) -> Plan:
        from edgesmith.compress.export_netx import ExportNetxConfig
        from edgesmith.compress.qat_loihi import QatLoihiConfig
        from edgesmith.compress.torch_source import TorchSourceConfig
        from edgesmith.hardware.host_cpu import qat_unavailable

        if kopts.exclude:  # asking for fp32 layers on a chip without floating point is refused, not ignored
            raise EdgesmithError(f"loihi2 runs every layer in fixed point; it cannot keep {', '.join(kopts.exclude)} in "
                                 "fp32.", "drop --option exclude, or deploy to host-cpu or jetson-orin-nano.")
        if producer.native_format == "nir":  # a NIR graph of LIF-family neurons: fixed-point Lava LIF layers
            from edgesmith.compress.import_nir import ImportNirConfig

            variants = [Variant("lif-fixed", [ImportNirConfig()], ["lava"], "NIR graph -> netx network of Lava LIF "
                                "(CUBA) neurons, 8-bit weights, run in Lava (Loihi2SimCfg fixed_pt)")]
            return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance,
                        [ACTIVITY_NOTE])
        if producer.native_format == "netx":  # already a Lava network (lava-dl's netx export, or ours)
            variants = [Variant("netx", [], ["lava"], "the netx file as given, loaded by lava-dl's netx in Lava "
                                "(Loihi2SimCfg fixed_pt)")]
            return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance,
                        [ACTIVITY_NOTE])
        self._check_8bit_fits(producer)
        imports = []
        if producer.native_format == "onnx":  # a user's ONNX model: it maps only if it is a dense ReLU chain
            from edgesmith.compress.onnx_mlp import ImportOnnxMlpConfig, check_onnx_mlp

            try:
                check_onnx_mlp(producer.path)
            except EdgesmithError as e:
                raise EdgesmithError(f"loihi2 cannot run {producer.name}: {e.problem}", e.fix) from None
            imports = [ImportOnnxMlpConfig()]
        variants = [Variant("sigma-delta", imports + [ExportNetxConfig()], ["lava"],
                            "fixed-point Sigma-Delta network, written as netx HDF5 and run by lava-dl's netx in Lava "
                            "(Loihi2SimCfg fixed_pt)")]
        why = qat_unavailable(producer, kopts, options)
        if why is None:
            back = [TorchSourceConfig()] if producer.native_format == "onnx" else []
            variants.append(Variant("sigma-delta-qat", back + [QatLoihiConfig(epochs=int(kopts.qat_epochs)),
                                                               ExportNetxConfig()], ["lava"],
                                    "brevitas QAT on the conversion's own fixed-point grid (8-bit weights learned, "
                                    "not rounded), then the same netx Sigma-Delta network in Lava"))
        unavailable = {} if why is None else {"sigma-delta-qat": why}
        return Plan(self.name, select_variants(self.name, variants, options.variants, unavailable),
                    self.latency_provenance, [ACTIVITY_NOTE])

    def _check_8bit_fits(self, producer) -> None:
        module = getattr(producer, "module_", None)
        if module is not None and hasattr(module, "parameters"):  # 8-bit weights: one byte per parameter
            self.check_fits(int(sum(p.numel() for p in module.parameters())),
                            f"{getattr(producer, 'name', 'the model')} (8-bit weights)")

    planners = {"tensor": plan_tensor}  # other kinds: their family's plans (hardware/families/)


ACTIVITY_NOTE = ("Lava simulates the chip on this machine; latency and energy are estimated from its activity "
                 "counts with Loihi 1 per-event figures (no public Loihi 2 table)")
