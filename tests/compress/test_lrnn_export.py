"""netx HDF5 and NIR exports of the S5 denoiser, each read back by its own reader."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from edgesmith.compress.lrnn import export as E
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser


@pytest.fixture(scope="module")
def model():
    m = S5Denoiser(S5Config(width=0.25, n_layers=2), seed=3)
    with torch.no_grad():  # non-trivial norm statistics so the folding is exercised
        for blk in m.blocks:
            blk.norm.running_mean.uniform_(-0.5, 0.5)
            blk.norm.running_var.uniform_(0.5, 2.0)
    return m.eval()


def test_encoder_and_decoder_become_netx_networks_close_to_the_float_layers(model, tmp_path):
    from edgesmith.compress import netx_format

    feats = np.abs(np.random.default_rng(0).standard_normal((2, 40, 257)))
    parts = E.write_netx_parts(model, feats, tmp_path)
    enc = netx_format.NetxNet.load(parts["encoder"]["path"])
    dec = netx_format.NetxNet.load(parts["decoder"]["path"])
    assert enc.n_inputs == 257 and enc.n_outputs == model.cfg.d_model and not enc.layers[-1].sigma_output
    assert dec.n_outputs == 257 and dec.layers[-1].sigma_output
    enc_ref, dec_in = E.block_inputs(model, feats)
    out, _ = netx_format.run_float(enc, feats.reshape(-1, 257))
    assert np.corrcoef(out.ravel(), enc_ref.ravel())[0, 1] > 0.99
    assert parts["encoder"]["calibration_output_sqnr_db"] > 20 and parts["decoder"]["calibration_output_sqnr_db"] > 20


@pytest.mark.lava
def test_the_denoiser_netx_parts_load_in_lava_dl_and_run_bit_exact(model, tmp_path):
    from edgesmith.compress import Artifact
    from edgesmith.runtimes import get_runtime

    feats = np.abs(np.random.default_rng(0).standard_normal((2, 40, 257)))
    parts = E.write_netx_parts(model, feats, tmp_path)
    _, dec_in = E.block_inputs(model, feats)
    for name, x in (("encoder", feats.reshape(-1, 257)[:8]), ("decoder", dec_in[:8])):
        art = Artifact("netx", path=Path(parts[name]["path"]), meta={"input_shape": [x.shape[1]]})
        ref = get_runtime("netx-ref").load(art).run(x.astype(np.float32))
        lava = get_runtime("lava").load(art).run(x.astype(np.float32))
        np.testing.assert_array_equal(lava.named["output_int"], ref.named["output_int"])


def test_nir_graph_round_trips_and_reproduces_the_ssm(model, tmp_path):
    import nir

    path = E.write_nir(model, tmp_path / "lrnn.nir")
    graph = nir.read(str(path))
    assert isinstance(graph.nodes["s5_0_LI"], nir.LI) and isinstance(graph.nodes["s5_1_rot"], nir.Linear)
    assert ("s5_0_rot", "s5_0_LI") in [tuple(e) for e in graph.edges]  # the recurrent edge survived
    u = np.random.default_rng(1).standard_normal((30, model.cfg.d_model))
    for l, blk in enumerate(model.blocks):
        with torch.no_grad():
            uu = torch.from_numpy(u).float()[None]
            ref = blk.ssm(blk.norm(uu.transpose(1, 2)).transpose(1, 2))[0].double().numpy()
        np.testing.assert_allclose(E.nir_ssm_step(graph, l, u), ref, atol=2e-4)


def test_the_whole_denoiser_read_back_from_nir_matches_the_model(model, tmp_path):
    import nir

    graph = nir.read(str(E.write_nir(model, tmp_path / "lrnn.nir")), type_check=False)
    import json

    between = json.loads(graph.metadata["edgesmith"]["between"])
    assert [b["op"] for b in between][:2] == ["relu", "h + a * sigmoid(b)"]
    assert {"enc", "dec", "s5_0_glu_a", "s5_0_y"} <= set(graph.nodes)
    feats = np.abs(np.random.default_rng(2).standard_normal((40, 257)))
    with torch.no_grad():
        ref = model.eval()(torch.from_numpy(feats).float()[None])[0].double().numpy()
    out = E.nir_denoiser_forward(graph, feats)
    np.testing.assert_allclose(out, ref, atol=5e-4 * max(1.0, np.abs(ref).max()))
