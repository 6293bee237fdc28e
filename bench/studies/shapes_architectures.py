"""Public architectures deployed from their torch definition and input shapes alone.

    .venv/bin/python -m edgesmith.bench.studies.shapes_architectures --out runs/shapes [--force] [--only NAME ...]
        [--calibrate]   # 64 calibration samples per model: adds int8 (static, calibrated) to the table

Thirty Hugging Face transformers architectures nobody in this project wrote (encoders, decoder-only language models
with RoPE, ALiBi, sliding windows and grouped-query attention, vision transformers, convnets (residual, depthwise,
grouped, pooling-only), a segmentation model, speech encoders on spectra and on raw audio, and two recurrent language
models, Mamba's selective scan and RWKV-4), each built small from its public config with seeded random weights
(nothing is downloaded). Each is written as a ``file.py:make`` factory, the form a user hands to ``edgesmith deploy``
with ``--input-shape`` and no data, and deployed on host-cpu: traced, exported (the legacy exporter, or dynamo when it
fails or its file does not run or match torch), int4-quantized and timed. The table gives, per model: MatMul/Gemm
weights, the exported file's largest error against torch, fp32 and int4 file sizes, how many weight layers int4
quantized, int4's output SQNR against fp32 on the 32 synthetic inputs (fidelity, not a task score), and p50 latency at
batch 1 (measured in this process by the deploy) with the host-cpu cost model's energy estimate. A model the toolkit
cannot take is a row with its error, not a crash.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from edgesmith.bench.studies.claim_io import claim_command, refuse_existing, write_claim
from edgesmith.bench.recipe import parse_key_values
from edgesmith.common import EdgesmithError

HEADER = '''import torch
import transformers as T


class Out(torch.nn.Module):  # the tensor a user would deploy: logits, or an encoder's last hidden state
    def __init__(self, m, key="logits"):
        super().__init__()
        self.m, self.key = m, key

    def forward(self, *args):
        return getattr(self.m(*args), self.key)


def make():
    torch.manual_seed(0)
'''

TEXT = {"input_ids": "16:int64", "attention_mask": "16:int64"}
IDS = {"": "16:int64"}
IMAGE = {"": "3,32,32"}

# name -> (what the factory returns, its input shapes); configs are the architectures' own, sized down
ARCHITECTURES = {
    "bert": ("Out(T.BertForSequenceClassification(T.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, "
             "num_attention_heads=4, intermediate_size=128, max_position_embeddings=64, num_labels=3)))", TEXT),
    "distilbert": ("Out(T.DistilBertForSequenceClassification(T.DistilBertConfig(vocab_size=500, dim=64, n_layers=2, "
                   "n_heads=4, hidden_dim=128, max_position_embeddings=64, num_labels=3)))", TEXT),
    "albert": ("Out(T.AlbertForSequenceClassification(T.AlbertConfig(vocab_size=500, embedding_size=32, hidden_size=64, "
               "num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=64, "
               "num_labels=2)))", TEXT),
    "t5-encoder": ("Out(T.T5EncoderModel(T.T5Config(vocab_size=500, d_model=64, d_kv=16, d_ff=128, num_layers=2, "
                   "num_heads=4)), 'last_hidden_state')", TEXT),
    "gpt2": ("Out(T.GPT2LMHeadModel(T.GPT2Config(vocab_size=500, n_positions=64, n_embd=64, n_layer=2, n_head=4, "
             "bos_token_id=0, eos_token_id=0)))", IDS),
    "llama": ("Out(T.LlamaForCausalLM(T.LlamaConfig(vocab_size=500, hidden_size=64, intermediate_size=128, "
              "num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, "
              "use_cache=False)))", IDS),
    "qwen2": ("Out(T.Qwen2ForCausalLM(T.Qwen2Config(vocab_size=500, hidden_size=64, intermediate_size=128, "
              "num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, "
              "use_cache=False)))", IDS),
    "mistral": ("Out(T.MistralForCausalLM(T.MistralConfig(vocab_size=500, hidden_size=64, intermediate_size=128, "
                "num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, "
                "sliding_window=8, use_cache=False)))", IDS),
    "opt": ("Out(T.OPTForCausalLM(T.OPTConfig(vocab_size=500, hidden_size=64, ffn_dim=128, num_hidden_layers=2, "
            "num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64, use_cache=False, pad_token_id=1, "
            "bos_token_id=2, eos_token_id=2)))", IDS),
    "bloom": ("Out(T.BloomForCausalLM(T.BloomConfig(vocab_size=500, hidden_size=64, n_layer=2, n_head=4, "
              "use_cache=False)))", IDS),
    "gpt-neox": ("Out(T.GPTNeoXForCausalLM(T.GPTNeoXConfig(vocab_size=500, hidden_size=64, intermediate_size=128, "
                 "num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, use_cache=False)))", IDS),
    "phi": ("Out(T.PhiForCausalLM(T.PhiConfig(vocab_size=500, hidden_size=64, intermediate_size=128, "
            "num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, use_cache=False)))", IDS),
    "deit": ("Out(T.DeiTForImageClassification(T.DeiTConfig(image_size=32, patch_size=8, hidden_size=64, "
             "num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_labels=5)))", IMAGE),
    "swin": ("Out(T.SwinForImageClassification(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], "
             "num_heads=[2, 4], window_size=4, num_labels=5)))", IMAGE),
    "convnext": ("Out(T.ConvNextForImageClassification(T.ConvNextConfig(hidden_sizes=[16, 32, 48, 64], "
                 "depths=[1, 1, 1, 1], num_labels=5)))", IMAGE),
    "whisper-encoder": ("Out(T.WhisperModel(T.WhisperConfig(vocab_size=500, num_mel_bins=16, d_model=64, "
                        "encoder_layers=2, encoder_attention_heads=4, decoder_layers=1, decoder_attention_heads=4, "
                        "encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=50, pad_token_id=0, "
                        "bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)).get_encoder(), "
                        "'last_hidden_state')", {"": "16,100"}),
    "resnet": ("Out(T.ResNetForImageClassification(T.ResNetConfig(embedding_size=16, hidden_sizes=[16,32,48,64], "
               "depths=[1,1,1,1], num_labels=10)))", IMAGE),
    "mobilenet-v2": ("Out(T.MobileNetV2ForImageClassification(T.MobileNetV2Config(image_size=32, "
                     "depth_multiplier=0.35, num_labels=10)))", IMAGE),
    "regnet": ("Out(T.RegNetForImageClassification(T.RegNetConfig(embedding_size=16, hidden_sizes=[16,32,48,64], "
               "depths=[1,1,1,1], groups_width=8, num_labels=10)))", IMAGE),
    "poolformer": ("Out(T.PoolFormerForImageClassification(T.PoolFormerConfig(hidden_sizes=[16,32,48,64], "
                   "depths=[1,1,1,1], num_labels=10)))", IMAGE),
    "segformer": ("Out(T.SegformerForSemanticSegmentation(T.SegformerConfig(hidden_sizes=[16,32,48,64], "
                  "decoder_hidden_size=32, depths=[1,1,1,1], num_attention_heads=[1,1,2,2], num_labels=4)))", IMAGE),
    "levit": ("Out(T.LevitForImageClassification(T.LevitConfig(image_size=32, hidden_sizes=[32,48,64], "
              "num_attention_heads=[1,2,2], depths=[1,1,1], key_dim=[8,8,8], num_labels=10)))", IMAGE),
    "beit": ("Out(T.BeitForImageClassification(T.BeitConfig(image_size=32, patch_size=8, hidden_size=64, "
             "num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, use_relative_position_bias=True, "
             "num_labels=10)))", IMAGE),
    "wav2vec2": ("Out(T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, "
                 "num_attention_heads=4, intermediate_size=128, conv_dim=[32,32,32], conv_stride=[5,2,2], "
                 "conv_kernel=[10,3,3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, "
                 "num_labels=4)))", {"": "4000"}),
    "mamba": ("Out(T.MambaForCausalLM(T.MambaConfig(vocab_size=500, hidden_size=64, state_size=8, "
              "num_hidden_layers=2, expand=2, use_mambapy=False)))", IDS),
    "rwkv4": ("Out(T.RwkvForCausalLM(T.RwkvConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, "
              "attention_hidden_size=64, intermediate_size=128, context_length=64)))", IDS),
    "roberta": ("Out(T.RobertaForSequenceClassification(T.RobertaConfig(vocab_size=500, hidden_size=64, "
                "num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, "
                "max_position_embeddings=40)))", TEXT),
    "deberta-v2": ("Out(T.DebertaV2ForSequenceClassification(T.DebertaV2Config(vocab_size=500, hidden_size=64, "
                   "num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=40, "
                   "relative_attention=True, position_buckets=8, pos_att_type=['p2c','c2p'])))", TEXT),
    "gemma": ("Out(T.GemmaForCausalLM(T.GemmaConfig(vocab_size=500, hidden_size=64, intermediate_size=128, "
              "num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16, "
              "max_position_embeddings=64)))", IDS),
    "modernbert": ("Out(T.ModernBertForSequenceClassification(T.ModernBertConfig(vocab_size=500, hidden_size=64, "
                   "num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=64, "
                   "pad_token_id=0)))", TEXT),
}


def factory_text(expr: str) -> str:
    return HEADER + f"    return {expr}.eval()\n"


def shapes_and_types(given: dict) -> tuple[dict, dict]:
    shapes, types = {}, {}
    for name, text in given.items():
        dims, _, dtype = text.partition(":")
        shapes[name] = tuple(int(d) for d in dims.split(","))
        if dtype:
            types[name] = dtype
    return shapes, types


def calibration_file(name: str, folder: Path, shapes: dict, types: dict, n: int = 64) -> Path:
    """``n`` samples for the int8 variant, made like the synthetic inputs: ids below the model's 500-word vocabulary,
    masks of ones, standard normal floats (seed 0)."""
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {}
    for key, shape in shapes.items():
        if types.get(key, "float32") == "float32":
            arrays[key or "input"] = rng.standard_normal((n, *shape)).astype(np.float32)
        elif "mask" in key:
            arrays[key] = np.ones((n, *shape), np.int64)
        else:
            arrays[key or "input"] = rng.integers(0, 500, (n, *shape)).astype(np.int64)
    path = folder / "data" / f"{name}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(arrays) == 1:  # a one-input model reads its file whatever the array is called
        path = path.with_suffix(".npy")
        np.save(path, next(iter(arrays.values())))
    else:
        np.savez(path, **arrays)
    return path


def run_one(name: str, folder: Path, reps: int, threads: int, calibrate: bool = False, options: dict | None = None) -> dict:
    import edgesmith

    expr, given = ARCHITECTURES[name]
    src = folder / "factories" / f"{name.replace('-', '_')}.py"
    src.write_text(factory_text(expr))
    shapes, types = shapes_and_types(given)
    data = {}
    if calibrate:  # int8 then calibrates on it and every variant is scored on it; no --input-shape needed
        data = {"calibration_data": calibration_file(name, folder, shapes, types)}
        data["eval_data"] = data["calibration_data"]
        shapes, types = {}, {}
    t0 = time.perf_counter()
    try:
        out = edgesmith.deploy(f"{src}:make", target="host-cpu", out=folder / "deploys" / name, tvm=False, reps=reps,
                               warmup=10, threads=threads, batch_sizes=(1,), input_shapes=shapes, input_types=types,
                               force=True, options=options, **data)
    except EdgesmithError as e:
        return {"model": name, "error": e.problem, "deploy_wall_s": time.perf_counter() - t0}
    r = json.loads((out / "report.json").read_text())
    rows = {x["variant"]: x for x in r["results"]}
    int4 = next(v for v in r["variants"] if v["name"] == "int4")["pass_reports"][-1]["layers"]
    export = next(n for n in r["notes"] if n.startswith("exported from torch to ONNX here"))
    shared = next((int(n.split()[0]) for n in r["notes"] if "Identity node(s) of a weight removed" in n), 0)
    params = sum(x.get("n_params", 0) for x in int4)  # run-time MatMuls have no weight to count
    return {"model": name, "inputs": given, "weight_params": params,
            "export_error_vs_torch": float(export.rsplit(": ", 1)[1]),
            "identities_removed": shared,
            "fp32_bytes": rows["fp32"]["size_bytes"], "int4_bytes": rows["int4"]["size_bytes"],
            "int4_layers": f"{sum(x['action'] == 'quantized' for x in int4)}/{len(int4)}",
            "int4_sqnr_db": rows["int4"]["evaluation"]["value"],
            "int8_sqnr_db": rows["int8"]["evaluation"]["value"] if "int8" in rows else None,
            "int8_bytes": rows["int8"]["size_bytes"] if "int8" in rows else None,
            "int8_p50_s": rows["int8"]["latency"]["1"]["p50"] if "int8" in rows else None,
            "int8_kept_fp32": [n for v in r["variants"] if v["name"] == "int8" for n in v["pass_reports"][-1]["notes"]
                               if "kept in fp32" in n],
            "fp32_p50_s": rows["fp32"]["latency"]["1"]["p50"], "int4_p50_s": rows["int4"]["latency"]["1"]["p50"],
            "latency_provenance": rows["fp32"]["latency"]["1"]["provenance"],
            "fp32_energy_j": rows["fp32"]["energy"]["energy_j_per_sample"],
            "int4_energy_j": rows["int4"]["energy"]["energy_j_per_sample"],
            "energy_provenance": f"{rows['fp32']['energy']['provenance']} ({rows['fp32']['energy'].get('cost_model')})",
            "cpu": r["target"]["detected_cpu"].get("model_name"),
            "deploy_wall_s": time.perf_counter() - t0}


def run(folder: Path, names: list[str], reps: int, threads: int, calibrate: bool = False,
        options: dict | None = None) -> dict:
    from tqdm import tqdm

    (folder / "factories").mkdir(parents=True, exist_ok=True)
    rows = []
    bar = tqdm(names, desc="architectures", unit="model")
    for name in bar:
        bar.set_postfix_str(name)
        rows.append(run_one(name, folder, reps, threads, calibrate, options))
    return {"rows": rows, "reps": reps, "threads": threads, "calibrate": calibrate, "options": options or {}}


def markdown(res: dict) -> str:
    lines = [f"Host: {next((r['cpu'] for r in res['rows'] if 'cpu' in r), '?')}, {res['threads']} threads, {res['reps']} "
             "timed calls per figure. Latency measured (p50, batch 1); energy estimated by the host-cpu cost model. "
             "SQNR: int4 against fp32 on 32 synthetic inputs (fidelity, not a task score).", "",
             "| model | inputs | MatMul/Gemm weights | export error vs torch | fp32 -> int4 size | int4 layers | int4 SQNR (dB) | "
             "p50 fp32 / int4 (measured) | energy fp32 / int4 (estimated) |", "|---|---|---|---|---|---|---|---|---|"]
    if res.get("calibrate"):
        lines[0] = lines[0].replace("SQNR: int4 against fp32 on 32 synthetic inputs", "SQNR: int8 and int4 against fp32 on "
                                    "the 64 calibration samples (ids below 500, masks of ones, normal floats; seed 0)")
        lines[0] += (" int8 nodes kept fp32: float arithmetic computing integer indices (index) and nodes on a "
                     "tensor calibrated beyond +-1e30 (mask), as the int8 pass's notes say.")
        lines[2:4] = ["| model | MatMul/Gemm weights | fp32 -> int8 / int4 size | int8 SQNR (dB) | int4 SQNR (dB) | "
                      "p50 fp32 / int8 / int4 (measured) | int8 nodes kept fp32 |", "|---|---|---|---|---|---|---|"]
    if res.get("options"):
        lines[0] += " Deploy options: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in res["options"].items()) + "."
    for r in res["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | refused: {r['error']} |" + " |" * (5 if res.get("calibrate") else 7))
            continue
        if res.get("calibrate"):
            kept = ", ".join(f"{k.split()[0]} {'index' if 'indices' in k else 'mask' if 'mask-like' in k else 'other'}"
                             for k in r["int8_kept_fp32"]) or "-"
            lines.append(f"| {r['model']} | {r['weight_params']:,} | {r['fp32_bytes'] / 1024:.0f} -> "
                         f"{r['int8_bytes'] / 1024:.0f} / {r['int4_bytes'] / 1024:.0f} KiB | {r['int8_sqnr_db']:.1f} | "
                         f"{r['int4_sqnr_db']:.1f} | {r['fp32_p50_s'] * 1e6:.0f} / {r['int8_p50_s'] * 1e6:.0f} / "
                         f"{r['int4_p50_s'] * 1e6:.0f} us | {kept} |")
            continue
        inputs = ", ".join(f"{k or 'input'} {v}" for k, v in r["inputs"].items())
        lines.append(f"| {r['model']} | {inputs} | {r['weight_params']:,} | {r['export_error_vs_torch']:.2g} | "
                     f"{r['fp32_bytes'] / 1024:.0f} -> {r['int4_bytes'] / 1024:.0f} KiB | {r['int4_layers']} | "
                     f"{r['int4_sqnr_db']:.1f} | {r['fp32_p50_s'] * 1e6:.0f} / {r['int4_p50_s'] * 1e6:.0f} us | "
                     f"{r['fp32_energy_j'] * 1e3:.2f} / {r['int4_energy_j'] * 1e3:.2f} mJ |")
    return "\n".join(lines) + "\n"


def plot(res: dict, folder: Path) -> list[str]:
    """int4 output SQNR and size ratio per architecture."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in res["rows"] if "error" not in r]
    if not ok:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    names = [r["model"] for r in ok]
    axes[0].bar(names, [r["int4_sqnr_db"] for r in ok])
    axes[0].set_ylabel("int4 output SQNR vs fp32 (dB)")
    axes[1].bar(names, [r["int4_bytes"] / r["fp32_bytes"] for r in ok])
    axes[1].set_ylabel("int4 file size / fp32")
    for ax in axes:
        ax.tick_params(axis="x", rotation=60)
    fig.tight_layout()
    fig.savefig(folder / "shapes.png", dpi=110)
    plt.close(fig)
    return ["shapes.png"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgesmith.bench.studies.shapes_architectures",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/shapes"))
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--only", nargs="+", choices=sorted(ARCHITECTURES), help="these architectures only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--calibrate", action="store_true",
                    help="give each model 64 calibration samples: adds the int8 variant, scored on those samples")
    ap.add_argument("--option", action="append", metavar="KEY=VALUE",
                    help="a deploy option for every model, e.g. 'int8_op_types=[]' (onnxruntime's full int8 set)")
    a = ap.parse_args(argv)
    options = parse_key_values(a.option, "--option")
    refuse_existing(a.out, a.force)
    t0 = time.perf_counter()
    res = run(a.out.with_name(a.out.name + ".work"), a.only or list(ARCHITECTURES), a.reps, a.threads, a.calibrate,
              options)
    res["wall_seconds"] = time.perf_counter() - t0
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res["command"] = claim_command("edgesmith.bench.studies.shapes_architectures", argv)
    print(write_claim(a.out, a.force, res, markdown, lambda folder: plot(res, folder)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
