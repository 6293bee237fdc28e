"""netx HDF5 and NIR exports of the S5 denoiser, each read back by its own reader."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.compress.lrnn import export as E
from edgesmith.compress.lrnn import fixed as F
from edgesmith.common import EdgesmithError
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser


@pytest.fixture(scope="module")
def model():
    m = S5Denoiser(S5Config(width=0.25, n_layers=2), seed=3)
    with torch.no_grad():  # non-trivial norm statistics so the folding is exercised
        for blk in m.blocks:
            blk.norm.running_mean.uniform_(-0.5, 0.5)
            blk.norm.running_var.uniform_(0.5, 2.0)
    return m.eval()


def test_netx_file_round_trips_the_encoder(model, tmp_path):
    net = F.convert(model, np.abs(np.random.default_rng(0).standard_normal((2, 20, 257))))
    path = E.write_netx(net, tmp_path / "lrnn.net")
    layers = E.read_netx(path)
    assert [l["type"] for l in layers] == ["input", "dense"]
    np.testing.assert_array_equal(layers[1]["weight"], net["enc_w"])
    np.testing.assert_array_equal(layers[1]["bias"], net["enc_b"])
    assert layers[1]["neuron"]["type"] == "SDNN" and layers[1]["neuron"]["activation"] == "relu"


def test_netx_reader_rejects_other_files(tmp_path):
    (tmp_path / "x.net").write_bytes(b"not hdf5")
    with pytest.raises(EdgesmithError, match="netx"):
        E.read_netx(tmp_path / "x.net")


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
