"""export-rwkv-c: the C decoder's file keeps 4-bit codes exactly in the kernel's layout, codebook (VQ) and wider
SQ layers exactly as 8-bit codes, keeps or rounds fp32 linears as asked, and refuses models it cannot decode."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, apply_pass
from edgesmith.compress.export_rwkv_c import (ExportRWKVCConfig, by_quad, from_quad, pack_bytes, pack_nibbles,
                                              unpack_bytes, unpack_nibbles)
from edgesmith.compress.rwkvquant.rtn import rtn_quantize
from edgesmith.compress.rwkvquant.rwkvquant import linear_modules
from edgesmith.compress.rwkvquant.tensors import QuantLinear
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model


def rwkv7(n_embd: int = 128, head_size: int = 32):
    torch.manual_seed(0)
    return build_model(RWKVConfig(version=7, n_layer=2, n_embd=n_embd, head_size=head_size)).eval()


def export(model, tmp_path, **options):
    return apply_pass(Artifact("torch", module=model), ExportRWKVCConfig(**options), PassContext(workdir=tmp_path))


def test_nibble_packing_and_quad_interleaving_round_trip():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, size=(8, 128)).astype(np.uint8)
    packed = pack_nibbles(codes)
    assert packed.shape == (2, 2, 4, 32)
    # byte j of a row's 64 inputs: code j low, code j + 32 high; row 1 of quad 0 follows row 0's 32 bytes
    assert packed[0, 0, 1, 5] == codes[1, 5] | (codes[1, 37] << 4)
    assert packed[1, 1, 3, 0] == codes[7, 64] | (codes[7, 96] << 4)
    np.testing.assert_array_equal(unpack_nibbles(packed), codes)
    scales = rng.normal(size=(8, 3)).astype(np.float32)
    assert by_quad(scales)[1, 2, 3] == scales[7, 2]
    np.testing.assert_array_equal(from_quad(by_quad(scales)), scales)


def test_byte_packing_interleaves_a_quads_rows_per_64_inputs():
    codes = np.random.default_rng(0).integers(-128, 128, size=(8, 128)).astype(np.int8)
    packed = pack_bytes(codes)
    assert packed.shape == (2, 2, 4, 64) and packed[1, 1, 2, 5] == codes[6, 69]
    np.testing.assert_array_equal(unpack_bytes(packed), codes)


@pytest.mark.parametrize("method,bits", [("gptvq", 3), ("gptq", 6)])
def test_codebook_and_wide_layers_become_8bit_codes_equal_to_their_weights(tmp_path, method, bits):
    # the 8-bit form is exact: signed code times scale plus offset is the quantized model's own weight
    from edgesmith.compress.rwkvquant import make_config, quantize_rwkv

    calib = np.random.default_rng(3).integers(0, 256, (8, 64))
    q, _ = quantize_rwkv(rwkv7(), calib, make_config(method, bits=bits, seed=0))
    res = export(q, tmp_path)
    assert {r.action for r in res.report.layers} == {"quantized"}
    assert all(r.bits_per_weight == 9.0 for r in res.report.layers)  # 8-bit codes + 2 floats per 64
    with np.load(res.artifact.path) as z:
        for name, mod in (("L0.k", q.blocks[0].att.key), ("L1.fv", q.blocks[1].ffn.value)):
            codes = unpack_bytes(z[name + ".q8"]).astype(np.float64)
            s, o = from_quad(z[name + ".s"]).astype(np.float64), from_quad(z[name + ".o"]).astype(np.float64)
            group = codes.shape[1] // s.shape[1]
            w = codes * np.repeat(s, group, 1) + np.repeat(o, group, 1)
            ref = mod.weight.detach().double().numpy()
            np.testing.assert_allclose(w, ref, atol=1e-6 * np.abs(ref).max(), rtol=0)
    assert "12 as 8-bit codes" in res.report.notes[0]


def test_quantized_linears_keep_their_codes_and_fp32_ones_stay_fp32(tmp_path):
    model = rwkv7()
    lin = linear_modules(model)["blocks.0.att.key"]
    q = rtn_quantize(lin.weight.detach(), 3, 64)
    model.blocks[0].att.key = QuantLinear(q, lin.in_features, lin.out_features)
    res = export(model, tmp_path)
    with np.load(res.artifact.path) as z:
        np.testing.assert_array_equal(unpack_nibbles(z["L0.k.q"]), q.codes.numpy())
        np.testing.assert_array_equal(from_quad(z["L0.k.s"]), q.scales.float().numpy())
        np.testing.assert_array_equal(from_quad(z["L0.k.z"]), q.zeros.numpy())
        assert "L0.r.w" in z.files and "L0.r.q" not in z.files
    actions = {r.name: r.action for r in res.report.layers}
    assert actions["L0.k"] == "quantized" and actions["L0.r"] == "kept fp32"
    assert res.artifact.format == "rwkv-c" and res.report.extra["bytes_per_token"] > 0


def test_int4_mode_rounds_fp32_linears_at_the_given_group(tmp_path):
    model = rwkv7()
    res = export(model, tmp_path, weights="int4", group=128)
    w = model.blocks[1].ffn.value.weight.detach()
    ref = rtn_quantize(w, 4, 128)
    with np.load(res.artifact.path) as z:
        np.testing.assert_array_equal(unpack_nibbles(z["L1.fv.q"]), ref.codes.numpy())
        assert z["L1.fv.s"].shape == (128 // 4, 512 // 128, 4)
    assert all(r.action == "quantized" for r in res.report.layers)


def test_layers_the_kernel_cannot_take_are_dequantized_and_named(tmp_path):
    model = rwkv7()
    lin = model.blocks[0].att.value
    model.blocks[0].att.value = QuantLinear(rtn_quantize(lin.weight.detach(), 4, 16), 128, 128)  # group 16
    res = export(model, tmp_path)
    rep = {r.name: r for r in res.report.layers}["L0.v"]
    assert rep.action == "dequantized" and "group 16" in rep.reason
    assert any("L0.v" in n and "group 16" in n for n in res.report.notes)
    with np.load(res.artifact.path) as z:
        np.testing.assert_allclose(z["L0.v.w"], model.blocks[0].att.value.weight.detach().numpy())


def test_rwkv6_writes_its_gate_channel_receptance_and_five_mix_loras(tmp_path):
    six = build_model(RWKVConfig(version=6, n_layer=1, n_embd=64, head_size=16)).eval()
    res = export(six, tmp_path, weights="int4")
    assert [r.name for r in res.report.layers] == [f"L0.{n}" for n in ("r", "k", "v", "o", "g", "fk", "fr", "fv")]
    with np.load(res.artifact.path) as z:
        w2 = six.blocks[0].att.time_maa_w2.detach().numpy()  # (5, D, C): mix i's second half
        np.testing.assert_array_equal(z["L0.maa2_3.w"], w2[3].T)
        assert z["L0.maa1.w"].shape == (5 * six.cfg.d_mix_lora, 64) and z["L0.faaaa"].size == 64


def test_models_the_decoder_cannot_take_are_refused_by_name(tmp_path):
    with pytest.raises(EdgesmithError, match="export-rwkv-c takes an RWKV language model"):
        export(torch.nn.Linear(4, 4), tmp_path)
    wide = build_model(RWKVConfig(version=7, n_layer=1, n_embd=512, head_size=512)).eval()
    with pytest.raises(EdgesmithError, match="at most 256"):
        export(wide, tmp_path)


def test_config_refuses_groups_the_kernel_cannot_take():
    for group in (16, 48, 96, 0):
        with pytest.raises(EdgesmithError, match="32 or a multiple of 64"):
            ExportRWKVCConfig(group=group)
    assert ExportRWKVCConfig(group=32).group == 32
    with pytest.raises(EdgesmithError, match="weights"):
        ExportRWKVCConfig(weights="int3")
