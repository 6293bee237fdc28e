"""The decode-speed benchmark: its bandwidth probe and one end-to-end run on a tiny model (speed not judged)."""
import json

import pytest

from edgesmith.bench.studies import rwkv_decode_speed
from edgesmith.bench.studies.rwkv_decode_speed import ReadProbe
from edgesmith.compress.export_rwkv_c import why_unavailable


def test_read_probe_measures_every_stream_and_bounds_with_the_fastest():
    probe = ReadProbe([1, 2], n_bytes=8 * 2**20, links=3, reps=2)
    streams = ("torch_sum", "ort_matmul") + (("c_read",) if probe.c_lib is not None else ())
    for t in (1, 2):
        bw = probe(t)
        assert set(bw) == {*streams, "best"} and all(bw[k] > 0 for k in streams)
        assert bw["best"] == max(bw[k] for k in streams)


def test_the_c_read_probe_reads_every_float_on_any_thread_count():
    import numpy as np

    from edgesmith.runtimes.rwkv_c_rt import library

    if why_unavailable():
        pytest.skip(why_unavailable())
    lib = library()
    a = np.arange(1, 100_004, dtype=np.float32) % 7  # not whole 32-float steps, nor even shares
    for t in (1, 2, 3):
        lib.rwkv_set_threads(t)
        assert lib.rwkv_read_probe(a.ctypes.data, a.size) == pytest.approx(float(a.sum(dtype=np.float64)), rel=1e-6)


@pytest.mark.parametrize("version", [6, 7])
def test_decode_benchmark_pairs_each_round_with_its_own_bound(tmp_path, monkeypatch, version):
    # a small probe keeps the test light; the shipped default streams 512 + 384 MiB
    monkeypatch.setattr(rwkv_decode_speed, "ReadProbe",
                        lambda t: ReadProbe(t, n_bytes=8 * 2**20, links=2, reps=1))
    out = tmp_path / "decode.json"
    assert rwkv_decode_speed.main(["--version", str(version), "--n-layer", "2", "--n-embd", "64", "--head-size", "16",
                                   "--tokens", "4", "--rounds", "2", "--threads", "1", "--no-rwkvquant",
                                   "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    graphs = ("deploy", "decode", "c")  # "c": the C decoder
    assert set(res["graphs"]) == {f"{m}/{g}" for m in ("fp32", "int4", "int4-sym") for g in graphs}
    # int4 graphs quantize activations to int8 (accuracy_level 4): a tiny random model's near-tied logits may flip
    assert all(res["graphs"][f"fp32/{g}"]["same_tokens_as_torch"] for g in graphs)
    for g in res["graphs"].values():
        r = g["1"]
        assert len(r["runs"]) == len(r["bounds"]) == 2
        ratios = sorted(b / s for b, s in zip(r["bounds"], r["runs"]))
        assert ratios[0] <= r["times_bound"] <= ratios[-1]
        # against the best probe of the run: never below any round's own ratio at the median speed
        assert r["times_best_bound"] >= max(r["bounds"]) / r["tokens_per_s"] - 1e-9
    per_layer = {6: 8, 7: 6}[version]  # time mix r k v (gate) output, channel mix key value (receptance)
    assert res["graphs"]["int4/decode"]["matmulnbits"] == 2 * per_layer  # every block linear, both layers
    assert res["graphs"]["int4-sym/decode"]["matmulnbits"] == 2 * per_layer
    # no zero points stored: fewer bytes a token moves than the asymmetric graph's
    moved = {m: res["graphs"][f"{m}/decode"]["bytes_per_token"]["weights"] for m in ("int4", "int4-sym")}
    assert moved["int4-sym"] < moved["int4"]
    assert len(res["read_bandwidth_GBps"]["1"]) == 2 * 3 * len(graphs)  # one probe per round of every graph
    # the C decoder keeps the 4-bit codes (LoRAs, head and state stay fp32)
    c = {m: res["graphs"][f"{m}/c"] for m in ("fp32", "int4")}
    # RWKV-6's channel mix is 3.5 C wide: its value's 224 inputs (C = 64) do not split into the kernel's groups of 64
    assert all(a == "quantized" or (version == 6 and n.endswith(".fv")) for n, a in c["int4"]["linears"].items())
    assert set(c["fp32"]["linears"].values()) == {"kept fp32"}
    assert len(c["int4"]["linears"]) == 2 * per_layer
    assert c["int4"]["bytes_per_token"]["total"] < c["fp32"]["bytes_per_token"]["total"]
    assert c["int4"]["1"]["c_kernel_in_cache"]["Gweights_per_s"] > 0
    assert res["c_prefetch_f32"]["provenance"] == "measured"  # none set: the distance tuned on this machine
    llc = res["last_level_cache_bytes"]  # a tiny model fits in any last-level cache: every row says so
    assert llc is None or all(g["1"]["fits_in_last_level_cache"] for g in res["graphs"].values())
    prof = res["graphs"]["int4/decode"]["1"]["profile"]
    levels = (prof["matmulnbits_in_cache"], prof["matmulnbits_in_cache_fp32_compute"])
    assert [p["accuracy_level"] for p in levels] == [4, 0] and all(p["Gweights_per_s"] > 0 for p in levels)


def test_decode_benchmark_takes_a_subset_of_models_and_a_set_prefetch(tmp_path, monkeypatch):
    if why_unavailable():
        pytest.skip(why_unavailable())
    monkeypatch.setattr(rwkv_decode_speed, "ReadProbe",
                        lambda t: ReadProbe(t, n_bytes=8 * 2**20, links=2, reps=1))
    out = tmp_path / "decode.json"
    assert rwkv_decode_speed.main(["--n-layer", "2", "--n-embd", "64", "--head-size", "16", "--tokens", "2",
                                   "--rounds", "1", "--threads", "1", "--runtimes", "rwkv-c", "--models", "fp32",
                                   "--prefetch-f32", "512", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["graphs"]) == {"fp32/c"} and "rwkvquant" not in res
    assert res["c_prefetch_f32"] == {"bytes": 512, "provenance": "set by --prefetch-f32"}


def test_symmetric_ab_interleaves_rounds_and_pairs_them(tmp_path):
    out = tmp_path / "ab.json"
    assert rwkv_decode_speed.main(["--version", "7", "--n-layer", "2", "--n-embd", "64", "--head-size", "16",
                                   "--tokens", "3", "--rounds", "3", "--threads", "1", "--symmetric-ab",
                                   "--out", str(out)]) == 0
    r = json.loads(out.read_text())["symmetric_ab"]["1"]
    assert [len(v) for v in r["runs"].values()] == [3, 3]
    ratios = sorted(b / a for a, b in zip(r["runs"]["int4"], r["runs"]["int4-sym"]))
    assert r["int4-sym_over_int4"] == ratios[1] and r["rounds_faster"] == sum(x > 1 for x in ratios)
