"""The RWKV quantization framework: model rewrite, decisions, exact bpw, exact save/reload, passes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.compress.base import Artifact, PassContext, apply_pass, config_from_dict, config_from_json
from edgesmith.compress.rwkvquant import load_quantized, make_config, quantize_rwkv, save_quantized
from edgesmith.compress.rwkvquant.qcheckpoint import quantized_payload
from edgesmith.compress.rwkvquant.tensors import QuantLinear
from edgesmith.common import EdgesmithError
from rwkv_helpers import tiny, weights_of


CALIB = np.random.default_rng(0).integers(0, 256, size=(4, 32))
FAST = dict(kmeans_iters=5, n_calibration=4)


@pytest.mark.parametrize("version", [6, 7])
@pytest.mark.parametrize("method", ["rtn", "gptq", "gptvq", "rwkvquant"])
def test_every_method_replaces_all_block_linears_and_accounts_bits_exactly(version, method):
    m = tiny(version)
    q, rep = quantize_rwkv(m, CALIB, make_config(method, bits=2, group_size=32, **FAST))  # 2 bits: small codebooks, fast
    qlin = [mod for mod in q.modules() if isinstance(mod, QuantLinear)]
    assert len(qlin) == (16 if version == 6 else 12)
    bits = sum(mod.q.storage_bits() for mod in qlin)
    n = sum(mod.q.n_weights for mod in qlin)
    assert rep.bits_per_weight == pytest.approx(bits / n)
    assert 2.0 < rep.bits_per_weight < 2.8
    assert isinstance(m.blocks[0].att.key, torch.nn.Linear)  # the input model is untouched
    with torch.no_grad():
        assert torch.isfinite(q(torch.as_tensor(CALIB[:1]))[0]).all()


def test_rwkvquant_reports_thresholds_and_a_decision_per_matrix():
    q, rep = quantize_rwkv(tiny(7), CALIB, make_config("rwkvquant", sq_percentile=75.0, **FAST))
    dec = rep.extra["decision"]
    assert dec["percentile"] == 75.0 and dec["tau_c"] > 0 and dec["tau_f"] > 0
    linears = [layer for layer in rep.layers if layer.action.startswith("quantized")]
    assert {layer.action for layer in linears} == {"quantized-SQ", "quantized-VQ"}
    for layer in linears:
        assert "P_c" in layer.error and ("P_c=" in layer.reason or "P_f=" in layer.reason)
        assert (layer.action == "quantized-SQ") == (layer.error["P_c"] < dec["tau_c"] and layer.error["P_f"] < dec["tau_f"])
    vectors = [layer for layer in rep.layers if layer.action == "codebook"]
    assert len(vectors) == 2 * 7
    assert all(layer.bits_per_weight == pytest.approx(3 + (8 * 8 + 32) / 64) for layer in vectors)
    assert len(torch.unique(q.blocks[1].att.x_k)) <= 8


@pytest.mark.parametrize("method,extra", [("gptq", {}), ("rwkvquant", {}), ("rwkvquant", {"vq_scale_block": 16})])
def test_quantized_checkpoint_reloads_bit_exactly(tmp_path, method, extra):
    q, _ = quantize_rwkv(tiny(6), CALIB, make_config(method, bits=3, group_size=32, sq_percentile=60.0, **FAST, **extra))
    if extra:
        assert any(m.q.kind == "vq" and m.q.scale_codes is not None for m in q.modules() if isinstance(m, QuantLinear))
    path = save_quantized(q, tmp_path / "q.pth")
    q2 = load_quantized(path)
    x = torch.as_tensor(CALIB[:2])
    with torch.no_grad():
        assert torch.equal(q(x)[0], q2(x)[0])
    # codes are bit-packed: the file holds the counted bits plus the unquantized tensors and little else
    counted = sum(mod.q.storage_bits() for mod in q.modules() if isinstance(mod, QuantLinear)) / 8
    vectors = sum(cb.storage_bits() for cb in q.quant_vectors.values()) / 8
    fp_bytes = sum(v.numel() * v.element_size() for v in quantized_payload(q)["fp"].values())
    assert counted + vectors + fp_bytes < path.stat().st_size < counted + vectors + fp_bytes + 60_000


def test_normalised_vq_keeps_the_sq_overhead_and_refuses_scales_that_cost_more():
    plain, norm = make_config("gptvq", bits=4), make_config("gptvq", bits=4, vq_scale_block=32)
    # the 4-bit scales (1/8 bit per weight) come out of the codebooks' share of SQ's 20/64 overhead
    assert norm.vq_weights_per_codebook() == round((256 * 2 * 8 + 32) / (20 / 64 - 4 / 32))
    assert norm.vq_weights_per_codebook() > plain.vq_weights_per_codebook()
    q, rep = quantize_rwkv(tiny(6), CALIB, make_config("gptvq", bits=3, group_size=32, vq_scale_block=16, **FAST))
    assert all("normalised per 16 columns" in layer.reason for layer in rep.layers if layer.action == "quantized-VQ")
    with pytest.raises(EdgesmithError, match="multiple of vq_dim"):
        make_config("gptvq", vq_scale_block=15)
    with pytest.raises(EdgesmithError, match="no less than SQ's whole overhead"):
        make_config("gptvq", vq_scale_block=8, vq_scale_bits=8, group_size=64)


def test_bad_quantized_file_is_rejected(tmp_path):
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(EdgesmithError, match="cannot be read"):
        load_quantized(tmp_path / "bad.pth")
    torch.save({"format": "other"}, tmp_path / "other.pth")
    with pytest.raises(EdgesmithError, match="not an edgesmith quantized RWKV"):
        load_quantized(tmp_path / "other.pth")


def test_pass_registration_round_trips_and_runs():
    cfg = config_from_dict({"kind": "rwkvquant", "bits": 4, "kmeans_iters": 5, "n_calibration": 4})
    assert cfg.method == "rwkvquant"
    assert config_from_dict(cfg.to_dict()) == cfg and config_from_json(cfg.to_json()).to_json() == cfg.to_json()
    with pytest.raises(EdgesmithError, match="bits"):
        config_from_dict({"kind": "rwkv-gptq", "bits": 1})
    m = tiny(7)
    res = apply_pass(Artifact("torch", module=m), config_from_dict({"kind": "rwkv-gptq", "n_calibration": 4}),
                     PassContext(workdir=__import__("pathlib").Path("/tmp"), calibration=CALIB))
    assert res.report.size_after_bytes < res.report.size_before_bytes
    assert res.artifact.meta["passes"] == ["rwkv-gptq"]


@pytest.mark.parametrize("version", [6, 7])
def test_calibration_stops_before_the_head_and_collects_the_same_hessians(version):
    from edgesmith.compress.rwkvquant.rwkvquant import collect_calibration, linear_modules

    m = tiny(version)
    calls = []
    handle = m.head.register_forward_hook(lambda *a: calls.append(1))
    try:
        H, _ = collect_calibration(m, CALIB)
    finally:
        handle.remove()
    # a 65,536-word head would cost more than every block together: it must never run
    assert calls == []
    x_in = {}

    def keep(mod, args, name):
        x_in[name] = args[0].reshape(-1, args[0].shape[-1])

    hooks = [mod.register_forward_pre_hook(lambda mod, a, n=n: keep(mod, a, n)) for n, mod in linear_modules(m).items()]
    with torch.no_grad():
        m(torch.as_tensor(CALIB))
    for h in hooks:
        h.remove()
    for name, x in x_in.items():
        x = x.double()
        torch.testing.assert_close(H[name], 2 * x.t() @ x / len(x))
    # the model still runs its head afterwards (the stop is removed with the hooks)
    assert m(torch.as_tensor(CALIB[:1]))[0].shape[-1] == m.cfg.vocab_size
