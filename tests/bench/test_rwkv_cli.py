"""`edgesmith quantize rwkv` and `edgesmith deploy rwkv`: artifacts that reload, reports with the
promised figures, and one-line user errors (exit 2, nothing written) for every bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cli_helpers import assert_user_error, run_cli
from edgesmith.bench.rwkv import RWKVDeployOptions, largest_cache_bytes
from edgesmith.compress.rwkvquant import load_quantized
from edgesmith.compress.rwkvquant.tensors import QuantLinear
from edgesmith.common import EdgesmithError
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model, save_rwkv


# --- quantize ---------------------------------------------------------------------------------------


def test_quantize_rwkv_rtn_4bit_writes_a_reloadable_checkpoint_and_a_report_with_bpw(capsys, tmp_path):
    out = tmp_path / "q.pth"
    code, stdout, err = run_cli(capsys, "quantize", "rwkv", "--method", "rtn", "--bits", "4", "--rwkv-model",
                                "rwkv7-ref", "--n-calibration", "4", "--out", out, "--quiet")
    assert code == 0, err
    model = load_quantized(out)
    assert sum(isinstance(m, QuantLinear) for m in model.modules()) == 12  # 2 layers x 6 block linears
    report = json.loads((tmp_path / "q.pth.report.json").read_text())
    # 4-bit codes plus an fp16 scale and a 4-bit zero point per group of 64
    assert report["bits_per_weight"] == pytest.approx(4 + 20 / 64)
    assert report["size_bytes"] == out.stat().st_size
    # every method codebook-quantizes the token-shift vectors the same way (plain k-means for RTN)
    assert {layer["action"] for layer in report["layers"]} == {"quantized-SQ", "codebook"}
    assert all("plain k-means" in layer["reason"] for layer in report["layers"] if layer["action"] == "codebook")
    ppl = report["perplexity"]
    assert ppl["fp32"]["eval_bytes"] == ppl["quantized"]["eval_bytes"] > 0
    assert ppl["fp32"]["perplexity"] < ppl["quantized"]["perplexity"] < 1.1 * ppl["fp32"]["perplexity"]
    assert "bits/weight" in stdout and "perplexity" in stdout


def test_quantize_rwkv_of_a_user_checkpoint_with_another_vocabulary_says_why_perplexity_is_missing(capsys, tmp_path):
    torch.manual_seed(0)
    user = build_model(RWKVConfig(version=6, n_layer=1, n_embd=64, head_size=32, vocab_size=300))
    pth = save_rwkv(user, tmp_path / "user.pth")
    out = tmp_path / "user-q.pth"
    code, _, err = run_cli(capsys, "quantize", "rwkv", "--method", "gptq", "--bits", "3", "--rwkv-model", pth,
                           "--n-calibration", "2", "--out", out, "--quiet")
    assert code == 0, err
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["input"] == str(pth) and report["model_config"]["vocab_size"] == 300
    assert report["perplexity"] is None
    assert any("vocabulary has 300 tokens" in n for n in report["notes"])
    assert load_quantized(out).cfg.version == 6


@pytest.mark.parametrize("flag,value,needle", [("--method", "awq", "rwkvquant"), ("--bits", "5", "--bits 3"),
                                               ("--bits", "four", "--bits 3")])
def test_quantize_rwkv_wrong_method_or_bits_is_a_user_error(capsys, tmp_path, flag, value, needle):
    out = tmp_path / "q.pth"
    code, _, err = run_cli(capsys, "quantize", "rwkv", flag, value, "--out", out)
    assert_user_error(code, err, value, needle)
    assert not out.exists()


def test_quantize_rwkv_bad_group_size_is_a_user_error_naming_the_field(capsys, tmp_path):
    code, _, err = run_cli(capsys, "quantize", "rwkv", "--group-size", "3", "--out", tmp_path / "q.pth")
    assert_user_error(code, err, "group_size")


def test_quantize_rwkv_missing_checkpoint_is_a_user_error(capsys, tmp_path):
    out = tmp_path / "q.pth"
    code, _, err = run_cli(capsys, "quantize", "rwkv", "--rwkv-model", tmp_path / "nope.pth", "--out", out)
    assert_user_error(code, err, "nope.pth", "does not exist")
    assert not out.exists()


def test_quantize_rwkv_corrupt_checkpoint_is_a_user_error(capsys, tmp_path):
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"PK\x03\x04 this is not a torch archive")
    out = tmp_path / "q.pth"
    code, _, err = run_cli(capsys, "quantize", "rwkv", "--rwkv-model", bad, "--out", out)
    assert_user_error(code, err, "bad.pth", "cannot be read")
    assert not out.exists() and not Path(f"{out}.report.json").exists()


def test_quantize_rwkv_unknown_model_name_is_a_user_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "quantize", "rwkv", "--rwkv-model", "rwkv9-ref", "--out", tmp_path / "q.pth")
    assert_user_error(code, err, "rwkv9-ref", "rwkv7-ref")


def test_quantize_rwkv_refuses_to_overwrite_an_existing_out(capsys, tmp_path):
    out = tmp_path / "q.pth"
    out.write_bytes(b"user data")
    code, _, err = run_cli(capsys, "quantize", "rwkv", "--method", "rtn", "--bits", "4", "--out", out)
    assert_user_error(code, err, "already exists", "--force")
    assert out.read_bytes() == b"user data"


# --- deploy -----------------------------------------------------------------------------------------


def test_quick_deploy_rwkv_writes_table_plots_checkpoints_and_measured_decode_speed(capsys, tmp_path):
    out = tmp_path / "report"
    code, stdout, err = run_cli(capsys, "deploy", "rwkv", "--target", "host-cpu", "--quick", "--quiet", "--out", out)
    assert code == 0, err
    assert "report.md" in stdout
    for name in ("report.json", "report.md", "ppl_vs_bpw.png", "rwkvquant_layers.png"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "report.json").read_text())
    (res,) = report["perplexity"]
    assert res["model"] == "rwkv7-ref"
    assert [(r["method"], r["bits"]) for r in res["rows"]] == [("fp32", 32), ("rtn", 4), ("rwkvquant", 4)]
    for row in res["rows"][1:]:
        ckpt = out / "checkpoints" / row["checkpoint"]
        assert row["size_bytes"] == ckpt.stat().st_size  # size on disk of the saved checkpoint
        assert 4 < row["bpw"] < 4.5 and row["ppl"] > 1
    rq = res["rows"][2]
    assert rq["n_sq"] + rq["n_vq"] == 12
    assert {layer["action"] for layer in rq["layers"]} >= {"quantized-SQ", "codebook"}
    dec = report["decode_speed"]
    assert dec["provenance"] == "measured" and dec["method"].startswith("measured")
    assert dec["threads"] == report["threads"] == 1
    for graph in ("fp32", "int4"):
        assert dec[graph]["tokens_per_s"] > 0 and dec[graph]["bound_tokens_per_s"] > 0
        assert dec[graph]["weight_bytes_per_token"] > 0
    md = (out / "report.md").read_text()
    assert "tokens/s (measured)" in md and "| rwkvquant | quantized | 4 |" in md and "ppl_vs_bpw.png" in md
    assert "RWKVQuant per-layer decisions" in md


def test_deploy_rwkv_to_another_target_is_a_user_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "deploy", "rwkv", "--target", "loihi2", "--out", tmp_path / "r")
    assert_user_error(code, err, "loihi2", "host-cpu")
    assert not (tmp_path / "r").exists()


def test_deploy_rwkv_refuses_generic_pipeline_flags_instead_of_ignoring_them(capsys, tmp_path):
    code, _, err = run_cli(capsys, "deploy", "rwkv", "--target", "host-cpu", "--batch", "8", "--out", tmp_path / "r")
    assert_user_error(code, err, "--batch")


def test_deploy_rwkv_refuses_an_existing_folder_without_force(capsys, tmp_path):
    (tmp_path / "r").mkdir()
    code, _, err = run_cli(capsys, "deploy", "rwkv", "--target", "host-cpu", "--quick", "--out", tmp_path / "r")
    assert_user_error(code, err, "already exists", "--force")


def test_quick_flag_on_a_non_rwkv_deploy_is_a_user_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "deploy", "digits-mlp", "--target", "host-cpu", "--quick", "--out", tmp_path / "r")
    assert_user_error(code, err, "--quick")


def test_rwkv_deploy_options_validate_and_round_trip_through_json(tmp_path):
    opts = RWKVDeployOptions.quick_preset(tmp_path / "r", threads=2)
    again = RWKVDeployOptions.from_dict(json.loads(json.dumps(opts.to_dict())))
    assert again == opts
    for bad in ({"bits": (5,)}, {"methods": ("awq",)}, {"models": ()}, {"decode_n_embd": 100}, {"threads": 0}):
        with pytest.raises(EdgesmithError):
            RWKVDeployOptions(out=tmp_path / "r", **bad)


def test_largest_cache_is_read_from_sysfs_layout(tmp_path):
    for i, (level, size) in enumerate([(1, "48K"), (2, "2048K"), (3, "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(f"{size}\n")
    assert largest_cache_bytes(str(tmp_path)) == (3, 32 * 2**20)
    assert largest_cache_bytes(str(tmp_path / "missing")) is None


def test_quant_table_picks_rwkvquant_percentile_by_validation_perplexity_only(tmp_path):
    from edgesmith.bench.benchmarks.rwkv_quant_table import TUNED, markdown, run_model

    res = run_model("rwkv7-ref", (3,), 4, log=lambda msg: None, methods=("gptq", TUNED), eval_sequences=2,
                    vectors=(False,), percentiles=(90.0, 100.0))
    fp, gptq, tuned = res["rows"]
    cands = {c["percentile"]: c["val_ppl"] for c in tuned["validation"]}
    assert set(cands) == {90.0, 100.0} and tuned["decision"]["percentile"] == min(cands, key=cands.get)
    assert tuned["val_ppl"] == min(cands.values())
    # validation text is not evaluation text: the fp32 model scores differently on the two
    assert fp["val_ppl"] != pytest.approx(fp["ppl"], rel=1e-3) and res["val_tokens"] == res["eval_tokens"]
    assert gptq["vectors"] == tuned["vectors"] == "fp" and tuned["n_vq"] >= 1
    assert f"| {TUNED} | fp | 3 |" in markdown([res])
    # the paired comparison is against GPTQ at the same bits, and per-window NLLs give the producer's perplexity
    assert "vs_gptq" in tuned and "vs_gptq" not in gptq and tuned["vs_gptq"]["se"] > 0
    from edgesmith.bench.benchmarks.rwkv_quant_table import window_nll
    from edgesmith.models import get_producer

    prod = get_producer("rwkv7-ref").build()
    prod.eval_sequences = 2
    assert float(np.exp(window_nll(prod.module, prod.eval_windows()).mean())) == pytest.approx(fp["ppl"], rel=1e-6)
