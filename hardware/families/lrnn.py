"""The LRNN family's plans: the S5 denoiser (a stream model) dense, pruned and as the w8a16 fixed-point network, on
host-cpu (torch, onnxruntime's streaming step, the Numba twin) and on loihi2 (in Lava, checked bit for bit)."""
from __future__ import annotations

from edgesmith.hardware.base import Plan, PlanOptions, Variant, register_plan
from edgesmith.hardware.host_cpu import module_fits, select_variants
from edgesmith.hardware.loihi2 import ACTIVITY_NOTE


@register_plan("host-cpu", "stream")
def host_cpu_stream(self, producer, options: PlanOptions, kopts) -> Plan:
    """Dense float, pruned float and the pruned w8a16 fixed-point network (Numba, bit-exact with Lava)."""
    from edgesmith.compress.export_step import ExportStepOnnxConfig
    from edgesmith.compress.lrnn.fixed import ExportLrnnFixedConfig
    from edgesmith.compress.lrnn.train_passes import PruneLrnnConfig, QatLrnnConfig

    module_fits(self, producer)
    prune = PruneLrnnConfig(sparsity=kopts.sparsity, epochs=kopts.prune_epochs, end=kopts.prune_end)
    variants = [
        Variant("dense", [], ["torch"], "the float model as trained (torch eager)"),
        Variant("dense-step", [ExportStepOnnxConfig()], ["onnxruntime"],
                "the float model's streaming step (a frame and the state in, mask and state out), fed frame by "
                "frame in onnxruntime"),
        Variant("sparse", [prune], ["torch"], f"{kopts.sparsity:.0%} unstructured sparsity, float"),
        Variant("sparse-fixed", [prune, QatLrnnConfig(epochs=kopts.qat_epochs),
                                 ExportLrnnFixedConfig()], ["lrnn-ref"],
                "pruned, quantization-aware fine-tuned, w8a16 fixed point (Numba; the Lava network's twin)"),
    ]
    notes = ["real-time factor = processing time / duration of the audio processed (below 1 keeps up)"]
    return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance, notes)


@register_plan("loihi2", "stream")
def loihi2_stream(self, producer, options: PlanOptions, kopts) -> Plan:
    from edgesmith.compress.lrnn.fixed import ExportLrnnFixedConfig
    from edgesmith.compress.lrnn.train_passes import PruneLrnnConfig, QatLrnnConfig

    self._check_8bit_fits(producer)
    passes = [PruneLrnnConfig(sparsity=kopts.sparsity, epochs=kopts.prune_epochs, end=kopts.prune_end),
              QatLrnnConfig(epochs=kopts.qat_epochs), ExportLrnnFixedConfig()]
    variants = [Variant("sparse-fixed", passes, ["lava-lrnn"],
                        f"{kopts.sparsity:.0%} sparse, w8a16 fixed point, in Lava (Loihi2SimCfg fixed_pt), "
                        "checked bit for bit against the Numba reference")]
    return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance,
                [ACTIVITY_NOTE, "activity and estimates are per clip; the report's time steps are frames"])
