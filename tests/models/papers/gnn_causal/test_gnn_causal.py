"""gnn-iia: exact interchange interventions, the transmission weights, prompt warm-up, the causal model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.gnn_causal.config import DataConfig, ModelConfig, TrainConfig
from edgesmith.models.papers.gnn_causal.data import counterfactual_labels, labels_from_z, load_splits, pack, unpack
from edgesmith.models.papers.gnn_causal.gnn import CausalGNN, Site, TransmissionModule, interchange
from edgesmith.models.papers.gnn_causal.train import batch_inputs, iia, train

SMALL = dict(n_train=24, n_test=12, min_nodes=4, max_nodes=6, m_tokens=4, d_token=8)


@pytest.fixture(scope="module")
def data():
    return load_splits(DataConfig(**SMALL))


def _model(transmission="attention", seed=0):
    torch.manual_seed(seed)
    return CausalGNN(ModelConfig(d_token=8, hidden=8, transmission=transmission), m_tokens=4, max_nodes=6).eval()


@pytest.mark.parametrize("site", [Site(0), Site(1, 2, 5), Site(2, 0, 4)])
def test_intervention_swaps_exactly_the_chosen_site_and_nothing_else(data, site):
    model = _model()
    base = batch_inputs(data["train"], np.arange(6), prompt=1)
    source = batch_inputs(data["train"], np.arange(6, 12), prompt=1)
    nodes = torch.tensor([0, 1, 2, 3, 0, 1])
    with torch.no_grad():
        _, base_reps, _ = model.run(*base)
        _, src_reps, _ = model.run(*source)
        _, reps = interchange(model, base, source, site, nodes)
    for layer in range(site.layer):
        assert torch.equal(reps[layer], base_reps[layer])  # upstream of the site: the base run, bit for bit
    width = reps[site.layer].shape[-1]
    sel = torch.zeros_like(reps[site.layer], dtype=torch.bool)
    sel[torch.arange(6), nodes, site.start : width if site.stop is None else site.stop] = True
    assert torch.equal(reps[site.layer][sel], src_reps[site.layer][sel])
    assert torch.equal(reps[site.layer][~sel], base_reps[site.layer][~sel])


def test_transmission_weights_are_a_distribution_over_all_tokens():
    tokens = torch.randn(3, 5, 12, 8, generator=torch.Generator().manual_seed(0))
    feat, w = TransmissionModule(8)(tokens)
    assert feat.shape == (3, 5, 8) and w.shape == (3, 5, 12)
    assert torch.all(w >= 0)
    assert torch.allclose(w.sum(-1), torch.ones(3, 5), atol=1e-6)


def test_prompt_is_chosen_after_warmup_and_then_stays_fixed(data):
    model = _model()
    seen = []
    hist = train(model, data["train"], TrainConfig(epochs=5, warmup_epochs=2, batch=8),
                 on_epoch=lambda e, rec: seen.append(int(model.prompt)))
    assert [h["prompt"] for h in hist[:2]] == [None, None]  # warm-up reads all prompts
    chosen = int(np.argmax(hist[1]["prompt_mass"]))
    assert seen[0] == -1 and seen[1:] == [chosen] * 4
    assert [h["prompt"] for h in hist[2:]] == [chosen] * 3


def test_mean_pooling_baseline_skips_the_warmup_and_uses_the_given_prompt(data):
    model = _model("mean")
    hist = train(model, data["train"], TrainConfig(epochs=2, warmup_epochs=1, batch=8), fixed_prompt=2)
    assert [h["prompt"] for h in hist] == [2, 2]


def test_causal_model_counts_active_edges_and_counterfactuals_swap_one_variable():
    adj = np.zeros((1, 4, 4), np.float32)
    for i, j in [(0, 1), (1, 2), (2, 3)]:
        adj[0, i, j] = adj[0, j, i] = 1
    z = np.array([[1, 1, 1, 0]])
    assert labels_from_z(z, adj).tolist() == [2]  # edges 0-1 and 1-2 are active
    assert counterfactual_labels(z, np.array([[0, 0, 0, 0]]), adj, np.array([1])).tolist() == [0]
    assert counterfactual_labels(z, np.array([[0, 0, 0, 1]]), adj, np.array([3])).tolist() == [2]
    assert counterfactual_labels(z, z, adj, np.array([2])).tolist() == [2]


def test_pack_unpack_round_trip_and_mismatched_shapes_are_user_errors(data):
    d = data["test"]
    p = pack(d.tokens[:, :, 0], d.adj, d.mask)
    tokens, adj, mask = unpack(torch.from_numpy(p), 4, 8, 6)
    np.testing.assert_array_equal(tokens.numpy(), d.tokens[:, :, 0])
    np.testing.assert_array_equal(adj.numpy(), d.adj)
    np.testing.assert_array_equal(mask.numpy(), d.mask)
    with pytest.raises(EdgesmithError, match="disagree"):
        pack(d.tokens[:, :, 0], d.adj[:, :3, :3], d.mask)
    with pytest.raises(EdgesmithError, match="transmission"):
        ModelConfig(transmission="max")
    with pytest.raises(EdgesmithError, match="warmup_epochs"):
        TrainConfig(epochs=2, warmup_epochs=3)


def test_swapping_a_nodes_tokens_equals_intervening_on_its_layer0_features(data):
    model = _model()
    model.prompt.fill_(1)
    d = data["test"]
    base = batch_inputs(d, np.arange(6), 1)
    source = batch_inputs(d, np.arange(6, 12), 1)
    nodes = torch.tensor([1, 0, 2, 1, 3, 0])
    swapped = base[0].clone()
    swapped[torch.arange(6), nodes] = source[0][torch.arange(6), nodes]
    with torch.no_grad():
        via_input = model.run(swapped, *base[1:])[0]
        via_site = interchange(model, base, source, Site(0), nodes)[0]
    # the producer's input-site IIA (through predict) measures the same thing as the layer-0 site
    assert torch.allclose(via_input, via_site, atol=1e-5)


def test_iia_rows_cover_every_layer_and_half_and_are_rates(data):
    rows = iia(_model(), data["test"], seed=0)
    assert [r["site"] for r in rows][:3] == ["L0[0:8]", "L0[0:4]", "L0[4:8]"] and len(rows) == 9
    assert all(0.0 <= r["iia"] <= 1.0 for r in rows)


def test_same_seed_gives_the_same_data_and_weights():
    a, b = load_splits(DataConfig(**SMALL, seed=2)), load_splits(DataConfig(**SMALL, seed=2))
    np.testing.assert_array_equal(a["train"].tokens, b["train"].tokens)
    assert not np.array_equal(a["train"].y, load_splits(DataConfig(**SMALL, seed=3))["train"].y)
    ws = []
    for _ in range(2):
        m = _model()
        train(m, a["train"], TrainConfig(epochs=2, warmup_epochs=1, batch=8, iit_weight=1.0, seed=5))
        ws.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert torch.equal(ws[0], ws[1])
