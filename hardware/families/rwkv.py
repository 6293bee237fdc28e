"""The RWKV family's plans: its token-lm models on host-cpu, as step graphs per quantizer and bit width, and in the
C decoder (``export-rwkv-c``, runtime ``rwkv-c``) where the CPU and the model allow it."""
from __future__ import annotations

from edgesmith.common import EdgesmithError
from edgesmith.hardware.base import Plan, PlanOptions, Variant, register_plan
from edgesmith.hardware.host_cpu import module_fits, select_variants


def with_decoders(variants: list[Variant], producer, kopts) -> tuple[list[Variant], list[str]]:
    """Token-LM variants for the decoders asked (``kopts.decoders``): the step graphs as planned (onnxruntime)
    and/or each variant again written by ``export-rwkv-c`` for the C decoder (name + "-c"), with a note where
    the C decoder cannot take the model."""
    from edgesmith.compress.export_rwkv_c import ExportRWKVCConfig, why_unavailable

    out = list(variants) if "onnxruntime" in kopts.decoders else []
    if "rwkv-c" not in kopts.decoders:
        return out, []
    cfg = getattr(getattr(producer, "module", None), "cfg", None)
    why = why_unavailable() or ("" if getattr(cfg, "version", None) in (6, 7) else
                                "the C decoder runs RWKV-6 and RWKV-7 language models (torch); this model is "
                                f"a {producer.native_format} model")
    if why:
        if not out:
            raise EdgesmithError(f"decoders=[rwkv-c] cannot decode {producer.name}: {why}.",
                                 "use --option decoders=onnxruntime (the step graphs).")
        return out, [f"rwkv-c left out: {why}"]
    for v in variants:
        out.append(Variant(f"{v.name}-c", v.passes[:-1] + [ExportRWKVCConfig()], ["rwkv-c"],
                           v.description.replace("step graph", "C decoder") + " (4-bit SQ codes as they are, "
                           "other layers fp32)"))
    return out, ["-c variants: the C decoder (export-rwkv-c, runtime rwkv-c), one token per call, batch 1 per "
                 "sequence, state copied in and out per step"]


@register_plan("host-cpu", "token-lm")
def host_cpu_token_lm(self, producer, options: PlanOptions, kopts) -> Plan:
    """fp32 and every quantizer x bits, each exported as a step graph (state in, state out) run in
    onnxruntime: perplexity by feeding the held-out windows token by token, decode speed per step."""
    from edgesmith.compress import config_from_dict
    from edgesmith.compress.export_step import ExportStepOnnxConfig

    module_fits(self, producer)
    hints = producer.unsupported_formats() if hasattr(producer, "unsupported_formats") else {}
    if "requantize" in hints:  # a model quantized earlier: its own step graph only
        variants = [Variant("as-given", [ExportStepOnnxConfig()], ["onnxruntime"],
                            f"the model as given, step graph ({hints['requantize']})")]
        variants, c_notes = with_decoders(variants, producer, kopts)
        return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance,
                    [f"no quantizer variants: {hints['requantize']}"] + c_notes)
    variants = [Variant("fp32", [ExportStepOnnxConfig()], ["onnxruntime"], "fp32 step graph")]
    for method in kopts.methods:
        for bits in kopts.bits:
            q = config_from_dict({"kind": method, "bits": bits, "group_size": kopts.group_size,
                                  "sq_percentile": float(kopts.sq_percentile), "proxy": kopts.proxy,
                                  "quantize_vectors": kopts.quantize_vectors, "symmetric": kopts.symmetric,
                                  "vq_scale_block": kopts.vq_scale_block, "sequential": kopts.sequential})
            name = f"{method.removeprefix('rwkv-')}-{bits}bit" + ("-sym" if kopts.symmetric else "")
            if kopts.vq_scale_block and method in ("rwkv-gptvq", "rwkvquant"):  # the methods with VQ matrices
                name += f"-vqn{kopts.vq_scale_block}"
            if kopts.proxy != "paper" and method == "rwkvquant":
                name += f"-{kopts.proxy}"
            if kopts.sequential and method != "rwkv-rtn":  # RTN reads no calibration data
                name += "-seq"
            variants.append(Variant(name, [q, ExportStepOnnxConfig()],
                                    ["onnxruntime"], f"{method} {bits}-bit weights, step graph "
                                    "(4-bit SQ layers as MatMulNBits, VQ layers as Gather-dequantize)"))
    variants, c_notes = with_decoders(variants, producer, kopts)
    notes = ["perplexity is scored on the step graph itself, fed one token at a time with its state carried",
             "decode speed: one step (one new token per sequence) timed in a fresh process; tokens/s = "
             "batch / p50"] + c_notes
    return Plan(self.name, select_variants(self.name, variants, options.variants), self.latency_provenance, notes)
