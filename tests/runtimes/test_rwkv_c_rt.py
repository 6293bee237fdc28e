"""The C RWKV-6/7 decoder: fp32 steps reproduce the torch model, the 4- and 8-bit kernels compute exactly the
integer arithmetic they document, and thread count, restarts and bad input behave."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, apply_pass
from edgesmith.compress.export_rwkv_c import ExportRWKVCConfig, from_quad, unpack_bytes, unpack_nibbles
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model
from edgesmith.runtimes import get_runtime
from edgesmith.runtimes import rwkv_c_rt
from edgesmith.runtimes.rwkv_c_rt import RWKVCDecoder, panel_width, to_panels, why_unavailable

pytestmark = pytest.mark.skipif(bool(why_unavailable()), reason=why_unavailable() or "available")


def rwkv_model(n_embd: int = 128, head_size: int = 32, n_layer: int = 2, version: int = 7):
    """Weights moved off their init (zero output projections, flat LoRAs) so every path carries signal."""
    torch.manual_seed(0)
    m = build_model(RWKVConfig(version=version, n_layer=n_layer, n_embd=n_embd, head_size=head_size)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.ndim == 2 and name.endswith(".weight"):
                p.normal_(0, p.shape[1] ** -0.5)
            else:
                p.add_(0.1 * torch.randn_like(p))
        m.emb.weight.normal_(0, 1)
    return m


def export(model, tmp_path, **options):
    return apply_pass(Artifact("torch", module=model), ExportRWKVCConfig(**options),
                      PassContext(workdir=tmp_path)).artifact


def torch_logits(model, tokens) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(tokens)[None])[0][0].numpy()


def quantized_model(method: str, bits: int, version: int = 7, n_embd: int = 128):
    from edgesmith.compress.rwkvquant import make_config, quantize_rwkv

    calib = np.random.default_rng(3).integers(0, 256, (8, 64))
    return quantize_rwkv(rwkv_model(n_embd=n_embd, version=version), calib, make_config(method, bits=bits, seed=0))[0]


def int8_activations(x: np.ndarray, ng: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' activation codes per group (scale max|x| / 127, round half to even) and the scales, float64."""
    xg = x.astype(np.float32).reshape(ng, -1)
    m = np.abs(xg).max(1)
    return np.round(xg * (np.float32(127) / m)[:, None]).astype(np.float64), (m / np.float32(127)).astype(np.float64)


def exact_q8(dec: RWKVCDecoder, name: str, x: np.ndarray) -> np.ndarray:
    """The 8-bit kernel's arithmetic in float64: integer products of signed codes and int8 activations, the
    scale times both scales, the offset times the activation group's sum as the kernel sees it (xs sum xq)."""
    a = dec.arrays_
    q = unpack_bytes(a[f"{name}.q8"]).astype(np.float64)
    s, o = from_quad(a[f"{name}.s"]).astype(np.float64), from_quad(a[f"{name}.o"]).astype(np.float64)
    rows, ng = s.shape
    xq, xs = int8_activations(x, ng)
    isum = (q.reshape(rows, ng, -1) * xq[None]).sum(-1)
    return (isum * s * xs[None] + o * (xs * xq.sum(-1))[None]).sum(1)


def exact_q4(dec: RWKVCDecoder, name: str, x: np.ndarray) -> np.ndarray:
    """The kernel's arithmetic in float64: int8 activations per group (scale max|x| / 127, round half to even),
    integer products with the 4-bit codes, zero points through the group's code sum, then the two scales."""
    a = dec.arrays_
    q = unpack_nibbles(a[f"{name}.q"]).astype(np.float64)
    s, z = from_quad(a[f"{name}.s"]).astype(np.float64), from_quad(a[f"{name}.z"]).astype(np.float64)
    rows, ng = s.shape
    xq, xs = int8_activations(x, ng)
    isum = (q.reshape(rows, ng, -1) * xq[None]).sum(-1) - z * xq.sum(-1)[None]
    return (isum * s * xs[None]).sum(1)


@pytest.mark.parametrize("version", [6, 7])
def test_fp32_steps_reproduce_the_torch_model(tmp_path, version):
    model = rwkv_model(version=version)
    model.init_wkv = 0.1 * torch.randn(2, 4, 32, 32)  # a state-tuned start: the decoder must begin from it
    tokens = np.random.default_rng(0).integers(0, 256, 24)
    dec = RWKVCDecoder(export(model, tmp_path).path, threads=1)
    got = np.stack([dec.step(int(t)) for t in tokens])
    np.testing.assert_allclose(got, torch_logits(model, tokens), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("group", [32, 64, 128])  # 32: each 64-input chunk's two halves are two groups
def test_the_4bit_kernel_computes_its_documented_integer_arithmetic(tmp_path, group):
    dec = RWKVCDecoder(export(rwkv_model(n_embd=256), tmp_path, weights="int4", group=group).path, threads=1)
    rng = np.random.default_rng(1)
    for name, n_in in (("L0.fk", 256), ("L1.fv", 1024), ("L0.r", 256)):
        x = rng.normal(size=n_in).astype(np.float32)
        x[3] = 40.0  # an outlier: its group's scale differs from the others'
        ref = exact_q4(dec, name, x)
        np.testing.assert_allclose(dec.gemv(name, x), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("version", [6, 7])
def test_4bit_decoding_stays_close_to_the_quantized_torch_model(tmp_path, version):
    from edgesmith.bench.studies.rwkv_decode_speed import quantize_rtn

    q = quantize_rtn(rwkv_model(version=version), 4, 64)
    tokens = np.random.default_rng(2).integers(0, 256, 16)
    ref = torch_logits(q, tokens)
    dec = RWKVCDecoder(export(q, tmp_path).path, threads=1)
    got = np.stack([dec.step(int(t)) for t in tokens])
    # the weights are the same codes; what differs is the int8 rounding of the activations (as MatMulNBits does)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.03
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.8


# RWKV-6 at C = 128: the FFN value's 448 inputs give codebooks of 224 columns, so its blocks are of 32
@pytest.mark.parametrize("version,n_embd,layers,group", [(7, 256, (("L0.fk", 256), ("L1.fv", 1024), ("L0.r", 256)), 64),
                                                         (6, 128, (("L0.fv", 448), ("L1.fv", 448)), 32)])
def test_the_8bit_kernel_computes_its_documented_integer_arithmetic(tmp_path, version, n_embd, layers, group):
    dec = RWKVCDecoder(export(quantized_model("gptvq", 3, version, n_embd), tmp_path).path, threads=1)
    rng = np.random.default_rng(1)
    for name, n_in in layers:
        assert f"{name}.q8" in dec.arrays_ and n_in // dec.arrays_[f"{name}.s"].shape[1] == group
        x = rng.normal(size=n_in).astype(np.float32)
        x[3] = 40.0
        ref = exact_q8(dec, name, x)
        np.testing.assert_allclose(dec.gemv(name, x), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("version", [6, 7])
def test_rwkvquant_models_decode_with_every_layer_as_codes(tmp_path, version):
    # SQ layers on the 4-bit kernel, VQ layers on the 8-bit one (RWKV-6's FFN value, whose codebooks span 224
    # of its 448 inputs, in blocks of 32).
    q = quantized_model("rwkvquant", 3, version=version)
    res = apply_pass(Artifact("torch", module=q), ExportRWKVCConfig(), PassContext(workdir=tmp_path))
    kinds = {getattr(getattr(m, "q", None), "kind", None) for m in q.modules()} - {None}
    assert kinds == {"sq", "vq"}  # the proxy chose both, so both kernels are exercised
    assert [r.name for r in res.report.layers if r.action != "quantized"] == []
    tokens = np.random.default_rng(4).integers(0, 256, 12)
    got = np.stack([step for step in map(RWKVCDecoder(res.artifact.path).step, map(int, tokens))])
    ref = torch_logits(q, tokens)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.03


@pytest.mark.parametrize("version,method", [(6, None), (7, None), (7, "gptvq"), (6, "gptvq")])
def test_threads_split_rows_without_changing_a_bit(tmp_path, version, method):
    model = quantized_model(method, 3, version) if method else rwkv_model(version=version)
    path = export(model, tmp_path, weights="int4").path
    tokens = [5, 17, 200, 3, 3, 99]
    one, two = RWKVCDecoder(path, threads=1), RWKVCDecoder(path, threads=2)
    for t in tokens:
        np.testing.assert_array_equal(one.step(t), two.step(t))


def test_runtime_runs_each_sequence_from_the_start(tmp_path):
    rt = get_runtime("rwkv-c", threads=1).load(export(rwkv_model(), tmp_path))
    res = rt.run(np.array([[1, 2, 3], [1, 2, 3], [7, 2, 3]]))
    assert res.outputs.shape == (3, 3, 256) and res.outputs.dtype == np.float32
    np.testing.assert_array_equal(res.outputs[0], res.outputs[1])
    assert not np.array_equal(res.outputs[0, 2], res.outputs[2, 2])
    assert res.stats["tokens"] == 9


def test_bad_tokens_and_damaged_files_are_user_errors(tmp_path):
    art = export(rwkv_model(), tmp_path / "ok")
    rt = get_runtime("rwkv-c", threads=1).load(art)
    with pytest.raises(EdgesmithError, match="outside the vocabulary"):
        rt.run(np.array([[1, 256]]))
    with pytest.raises(EdgesmithError, match="token ids"):
        rt.run(np.array([[0.5, 1.0]]))
    bad = tmp_path / "bad.rwkvc.npz"
    bad.write_bytes(art.path.read_bytes()[:1000])
    with pytest.raises(EdgesmithError, match="not an export-rwkv-c file"):
        get_runtime("rwkv-c").load(Artifact("rwkv-c", path=bad))
    with np.load(art.path) as z:
        arrays = {k: z[k] for k in z.files if k != "L1.fv.w"}
    np.savez(tmp_path / "short.rwkvc.npz", **arrays)
    with pytest.raises(EdgesmithError, match="L1.fv"):
        get_runtime("rwkv-c").load(Artifact("rwkv-c", path=tmp_path / "short.rwkvc.npz"))


def test_steps_with_the_state_fed_back_match_whole_sequences(tmp_path):
    from edgesmith.runtimes.stateful import recurrent_spec, run_sequence

    model = rwkv_model()
    model.init_wkv = 0.1 * torch.randn(2, 4, 32, 32)
    art = export(model, tmp_path)
    assert (tmp_path / "model.rwkvc.npz.init.npz").exists()  # the trained start, where stateful looks for it
    rt = get_runtime("rwkv-c", threads=1).load(art)
    tokens = np.random.default_rng(5).integers(0, 256, (2, 7))
    stepped, stats = run_sequence(rt, recurrent_spec(art.meta), tokens)
    np.testing.assert_array_equal(stepped, rt.run(tokens).outputs)
    assert stats["steps"] == 7
    np.testing.assert_allclose(stepped[1], torch_logits(model, tokens[1]), atol=2e-5, rtol=1e-4)
    with pytest.raises(EdgesmithError, match="state wkv has shape"):
        rt.run({"token": np.array([1]), "att_x": np.zeros((1, 2, 128), np.float32),
                "ffn_x": np.zeros((1, 2, 128), np.float32), "wkv": np.zeros((1, 2, 4, 32), np.float32)})


def test_loading_the_decoder_does_not_import_torch():
    # deploy times each artifact in a fresh process: the C decoder's must not carry torch's memory and start-up
    import subprocess
    import sys

    code = "import sys, edgesmith.runtimes.rwkv_c_rt; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_panel_layout_splits_wide_inputs_into_near_equal_panels():
    assert [panel_width(c) for c in (64, 2048, 2049, 4096, 7168, 3000)] == [0, 0, 1056, 2048, 1792, 1504]
    w = np.arange(3 * 3000, dtype=np.float32).reshape(3, 3000)
    p = to_panels(w, 1504)  # a full panel, then a narrower last one (1496 columns)
    np.testing.assert_array_equal(p[:3 * 1504].reshape(3, 1504), w[:, :1504])
    np.testing.assert_array_equal(p[3 * 1504:].reshape(3, 1496), w[:, 1504:])


@pytest.mark.parametrize("version", [6, 7])
def test_wide_fp32_matrices_read_as_panels_give_the_same_products(tmp_path, version):
    # n_embd 640: the channel mix's value reads 2240 (RWKV-6) or 2560 (RWKV-7) inputs, more than one panel holds
    model = rwkv_model(n_embd=640, head_size=64, version=version)
    path = export(model, tmp_path).path
    dec = RWKVCDecoder(path, threads=1)
    assert set(dec.panels_) == {"L0.fv", "L1.fv"} and "L0.fv.w" not in dec.arrays_
    x = np.random.default_rng(6).standard_normal(model.blocks[0].ffn.value.in_features).astype(np.float32)
    w = model.blocks[0].ffn.value.weight.detach().numpy()
    np.testing.assert_allclose(dec.gemv("L0.fv", x), w.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)
    tokens = [5, 17, 200, 3]
    two = RWKVCDecoder(path, threads=2)
    steps = []
    for t in tokens:  # the panels' partial sums are added in one order whatever the thread count
        steps.append(dec.step(t))
        np.testing.assert_array_equal(steps[-1], two.step(t))
    np.testing.assert_allclose(np.stack(steps), torch_logits(model, tokens), atol=2e-4, rtol=1e-4)


def test_prefetch_distance_changes_speed_not_results(tmp_path):
    path = export(rwkv_model(n_embd=640, head_size=64), tmp_path).path
    off, far = RWKVCDecoder(path, prefetch_f32=0), RWKVCDecoder(path, prefetch_f32=4096)
    for t in (1, 2, 3):
        np.testing.assert_array_equal(off.step(t), far.step(t))
    for bad in (-1, 2.5, True, 10**6):
        with pytest.raises(EdgesmithError, match="prefetch_f32"):
            RWKVCDecoder(path, prefetch_f32=bad)


def test_prefetch_choice_is_the_shortest_distance_within_the_margin_of_the_fastest():
    assert rwkv_c_rt.choose_prefetch({0: 23.6, 512: 23.5, 2048: 23.65}) == 0  # a tie within noise: no prefetch
    assert rwkv_c_rt.choose_prefetch({0: 20.0, 512: 20.5, 1024: 21.0, 2048: 26.0}) == 2048  # 30% faster: taken
    assert rwkv_c_rt.choose_prefetch({0: 20.0, 512: 25.0, 1024: 25.5}) == 512


def test_prefetch_tuning_is_measured_once_per_machine_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    monkeypatch.setattr(rwkv_c_rt, "tuning_bytes", lambda: 4 * 2**20)  # small: the test checks the bookkeeping
    rec = rwkv_c_rt.tuned_prefetch_f32()
    assert rec["bytes"] in rwkv_c_rt.PREFETCH_CHOICES and rec["provenance"] == "measured"
    assert set(rec["rates_GBps"]) == {str(d) for d in rwkv_c_rt.PREFETCH_CHOICES}
    rates = {int(d): r for d, r in rec["rates_GBps"].items()}
    assert rec["bytes"] == rwkv_c_rt.choose_prefetch(rates)
    [saved] = (tmp_path / "c_rt").glob("prefetch-f32-*.json")

    def measure_again(*args, **kwargs):
        raise AssertionError("measured again although the record is cached")

    monkeypatch.setattr(rwkv_c_rt, "measure_prefetch_f32", measure_again)
    assert rwkv_c_rt.tuned_prefetch_f32() == rec
    saved.write_text('{"cpu": "another machine", "bytes": 512}')  # a record that is not this machine's is remeasured
    with pytest.raises(AssertionError, match="measured again"):
        rwkv_c_rt.tuned_prefetch_f32()
