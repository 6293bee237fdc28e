"""Numba fixed-point reference of the S5 denoiser and the Lava process graph, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.compress.lrnn import fixed as F
from edgesmith.compress.lrnn.prune import Pruner
from edgesmith.models.lrnn.data import DataConfig, features, load_splits, stft
from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser
from edgesmith.runtimes import lrnn_ref


@pytest.fixture(scope="module")
def tiny_net():
    splits = load_splits(DataConfig.tiny())
    feat = features(stft(splits["train"].noisy).abs()).numpy()
    model = S5Denoiser(S5Config(width=0.25, n_layers=2), seed=0)
    Pruner(model).update(0.8)
    net = F.convert(model.eval(), feat)
    return net, F.quantize_features(net, feat)


def test_reference_is_deterministic_and_16_bit(tiny_net):
    net, u = tiny_net
    a, b = lrnn_ref.run(net, u[0]), lrnn_ref.run(net, u[0])
    assert np.array_equal(a["mask"], b["mask"])
    for k in ("mask", "h_enc", "x", "y", "h"):
        assert np.abs(a[k]).max() <= 2 ** 15 - 1


def test_recurrence_carries_state_across_frames(tiny_net):
    net, u = tiny_net
    full = lrnn_ref.run(net, u[0])["x"]
    tail = lrnn_ref.run(net, u[0][10:])["x"]
    assert not np.array_equal(full[:, 10:], tail)


def test_activity_counts_shrink_with_weight_sparsity(tiny_net):
    net, u = tiny_net
    stats = lrnn_ref.run(net, u[0])["stats"]
    dense = {k: (np.where(v == 0, 2, v) if k in ("enc_w", "w1", "w2", "dec_w", "b_re", "b_im", "c_re", "c_im")
                 else v) for k, v in net.items()}
    assert lrnn_ref.run(dense, u[0])["stats"]["synops"] > 2 * stats["synops"]
    assert stats["timesteps"] == u.shape[1] and stats["neuron_updates"] > 0


@pytest.mark.lava
def test_lava_graph_equals_numba_reference_bit_for_bit(tiny_net):
    from edgesmith.runtimes.lava_lrnn_rt import run_lava

    net, u = tiny_net
    ref = lrnn_ref.run(net, u[1])
    lava = run_lava(net, u[1], timeout_s=300)
    for k in ("mask", "h_enc", "x", "y", "h"):
        assert np.abs(lava[k] - ref[k]).max() == 0, k
    assert np.abs(ref["mask"]).max() > 100  # a non-trivial output was compared
    for k in ("synops", "neuron_updates", "messages"):
        assert lava["stats"][k] == ref["stats"][k]


def test_export_pass_and_reference_runtime_score_like_the_float_model(tmp_path):
    import torch

    from edgesmith.compress import Artifact, PassContext, config_from_dict, run_passes
    from edgesmith.runtimes import get_runtime

    splits = load_splits(DataConfig.tiny())
    feat = features(stft(splits["train"].noisy).abs()).numpy()
    model = S5Denoiser(S5Config(width=0.25, n_layers=1), seed=0).eval()
    cfg = config_from_dict({"kind": "export-lrnn-fixed", "n_calibration": 4})
    art, reports = run_passes(Artifact("torch", module=model), [cfg], PassContext(workdir=tmp_path, calibration=feat))
    assert art.path.name == "model.lrnn.npz" and reports[0].extra["weight_bytes"] > 0
    out = get_runtime("lrnn-ref").load(art).run(feat[:2])
    with torch.no_grad():
        ref = model(torch.from_numpy(feat[:2])).numpy()
    assert out.outputs.shape == ref.shape
    assert np.abs(out.outputs - ref).max() < 0.03 * np.abs(ref).max()
    assert out.stats["synops"] > 0


def test_export_pass_rejects_a_bad_option():
    from edgesmith.compress import config_from_dict
    from edgesmith.common import EdgesmithError

    with pytest.raises(EdgesmithError, match="n_calibration"):
        config_from_dict({"kind": "export-lrnn-fixed", "n_calibration": 0})
