"""prune-magnitude: sparsity reached per layer and globally, input untouched, honest sparse sizes."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from edgesmith.compress import Artifact, PassContext, apply_pass, config_from_json
from edgesmith.compress.prune import MagnitudePruneConfig, magnitude_masks, sparse_storage_bytes
from edgesmith.common import EdgesmithError


def _small_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv1d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6, 5), nn.ReLU(),
                         nn.Linear(5, 3)).eval()


def _prune(module, cfg, tmp_path):
    art = Artifact("torch", module=module, meta={"input_shape": [2, 8]})
    return apply_pass(art, cfg, PassContext(workdir=tmp_path, progress=False))


def _weights(module):
    return {n: p for n, p in module.named_parameters() if n.endswith("weight")}


@pytest.mark.parametrize("fields, field", [
    ({"sparsity": 1.0}, "sparsity"), ({"sparsity": -0.1}, "sparsity"), ({"sparsity": True}, "sparsity"),
    ({"scope": "channel"}, "scope"),
])
def test_invalid_config_fields_are_rejected_by_name(fields, field):
    with pytest.raises(EdgesmithError, match=f"prune-magnitude: {field} "):
        MagnitudePruneConfig(**fields)


def test_config_round_trips_through_json():
    cfg = MagnitudePruneConfig(sparsity=0.75, scope="global")
    assert config_from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.9])
def test_layer_scope_prunes_each_layer_to_the_requested_sparsity(tmp_path, sparsity):
    res = _prune(_small_net(), MagnitudePruneConfig(sparsity=sparsity, scope="layer"), tmp_path)
    for name, w in _weights(res.artifact.module).items():
        zeros = int((w == 0).sum())
        assert zeros == round(sparsity * w.numel()), name


def test_global_scope_uses_one_threshold_across_layers(tmp_path):
    net = _small_net()
    res = _prune(net, MagnitudePruneConfig(sparsity=0.6, scope="global"), tmp_path)
    before, after = _weights(net), _weights(res.artifact.module)
    total = sum(w.numel() for w in before.values())
    assert sum(int((w == 0).sum()) for w in after.values()) == round(0.6 * total)
    pruned = torch.cat([before[n][after[n] == 0].abs() for n in before])
    kept = torch.cat([before[n][after[n] != 0].abs() for n in before])
    assert pruned.max() <= kept.min()
    per_layer = [float((w == 0).float().mean()) for w in after.values()]
    assert max(per_layer) - min(per_layer) > 0.01  # one threshold does not give every layer the same share


def test_input_module_is_untouched_and_biases_are_kept(tmp_path):
    net = _small_net()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    res = _prune(net, MagnitudePruneConfig(sparsity=0.5), tmp_path)
    assert res.artifact.module is not net
    for k, v in net.state_dict().items():
        assert torch.equal(v, state[k]), k
    for k, v in res.artifact.module.state_dict().items():
        if k.endswith("bias"):
            assert torch.equal(v, state[k]), k


def test_sparse_storage_formulas_match_hand_computation():
    # 3x4 fp32 matrix with 6 non-zeros
    assert sparse_storage_bytes(3, 4, 6) == {"dense": 48, "csr": 6 * 4 + 6 * 4 + 4 * 4, "bitmask": 6 * 4 + 2}


def test_report_gives_csr_and_bitmask_sizes_and_the_best_per_tensor(tmp_path):
    lin = nn.Linear(4, 3).eval()
    with torch.no_grad():
        lin.weight.copy_(torch.arange(1, 13, dtype=torch.float32).view(3, 4))
    res = _prune(lin, MagnitudePruneConfig(sparsity=0.5), tmp_path)
    assert torch.equal(res.artifact.module.weight != 0, torch.arange(1, 13).view(3, 4) > 6)
    s = res.report.extra["sparse_storage"]
    assert (s["dense_bytes"], s["csr_bytes"], s["bitmask_bytes"], s["best_bytes"]) == (48, 64, 26, 26)
    assert s["layers"][0]["best_format"] == "bitmask"
    assert res.report.bits_per_weight == pytest.approx(26 * 8 / 12)
    assert s["model_sparse_size_bytes"] == 26 + 3 * 4  # bias stays dense
    # the artifact still stores zeros densely, and the report says so
    assert res.report.size_after_bytes == res.report.size_before_bytes == 15 * 4
    assert any("densely" in note for note in res.report.notes)


def test_csr_wins_when_very_sparse_and_dense_when_not_pruned(tmp_path):
    net = nn.Linear(256, 2).eval()  # 99% of 512: 5 non-zeros, CSR 52 bytes vs bitmask 84
    res = _prune(net, MagnitudePruneConfig(sparsity=0.99), tmp_path)
    assert res.report.extra["sparse_storage"]["layers"][0]["best_format"] == "csr"
    res0 = _prune(net, MagnitudePruneConfig(sparsity=0.0), tmp_path)
    assert res0.report.extra["sparse_storage"]["layers"][0]["best_format"] == "dense"
    assert res0.report.bits_per_weight == 32.0
    assert res0.report.layers[0].error["weight_sqnr_db"] is None  # nothing removed: exact


def test_weight_sqnr_reflects_the_removed_energy(tmp_path):
    lin = nn.Linear(2, 1).eval()
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 3.0]]))
    res = _prune(lin, MagnitudePruneConfig(sparsity=0.5), tmp_path)
    assert res.report.layers[0].error["weight_sqnr_db"] == pytest.approx(10 * math.log10(10 / 1), abs=1e-3)


def test_pruned_digits_mlp_still_classifies(digits, digits_torch, tmp_path):
    res = apply_pass(digits_torch, MagnitudePruneConfig(sparsity=0.5, scope="global"), PassContext(workdir=tmp_path))
    acc = digits.evaluate(lambda x: res.artifact.module(torch.from_numpy(x)).detach().numpy()).value
    assert acc > 0.9
    assert [layer.name for layer in res.report.layers] == ["0.weight", "2.weight", "4.weight"]


def test_model_without_linear_or_conv_is_rejected(tmp_path):
    with pytest.raises(EdgesmithError, match="no Linear or Conv"):
        _prune(nn.Sequential(nn.ReLU()), MagnitudePruneConfig(), tmp_path)


def test_masks_are_reproducible_under_ties():
    w = [torch.ones(10)]
    a, b = magnitude_masks(w, 0.5, "layer"), magnitude_masks(w, 0.5, "layer")
    assert torch.equal(a[0], b[0]) and int((~a[0]).sum()) == 5
