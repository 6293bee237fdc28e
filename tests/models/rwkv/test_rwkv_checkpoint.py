"""Official-layout checkpoints: round trip, official key names, and clear rejection of bad files."""
from __future__ import annotations

import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.rwkv.checkpoint import load_rwkv, save_rwkv

OFFICIAL_V6 = ["emb.weight", "blocks.0.ln0.weight", "blocks.0.att.time_maa_x", "blocks.0.att.time_maa_w1",
               "blocks.0.att.time_maa_w2", "blocks.0.att.time_decay_w1", "blocks.0.att.time_faaaa",
               "blocks.1.att.gate.weight", "blocks.1.att.ln_x.bias", "blocks.1.ffn.time_maa_r",
               "blocks.1.ffn.receptance.weight", "ln_out.weight", "head.weight"]
OFFICIAL_V7 = ["emb.weight", "blocks.0.ln0.bias", "blocks.0.att.x_r", "blocks.0.att.w0", "blocks.0.att.a2",
               "blocks.1.att.v1", "blocks.1.att.g2", "blocks.1.att.k_k", "blocks.1.att.k_a", "blocks.1.att.r_k",
               "blocks.1.ffn.x_k", "blocks.1.ffn.value.weight", "head.weight"]


@pytest.mark.parametrize("version,keys", [(6, OFFICIAL_V6), (7, OFFICIAL_V7)])
def test_save_load_round_trip_keeps_official_keys_and_logits(tmp_path, version, keys, random_rwkv):
    m = random_rwkv(version)
    path = save_rwkv(m, tmp_path / "m.pth")
    sd = torch.load(path, weights_only=True)
    assert set(keys) <= set(sd)
    assert sd["blocks.0.att." + ("time_maa_x" if version == 6 else "x_r")].shape == (1, 1, 64)
    m2 = load_rwkv(path)
    assert type(m2) is type(m) and m2.cfg == m.cfg
    idx = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        assert torch.equal(m(idx)[0], m2(idx)[0])


def test_flattened_vectors_from_converters_load(tmp_path, random_rwkv):
    m = random_rwkv(6)
    sd = {k: (v.flatten() if v.shape[:2] == (1, 1) else v) for k, v in m.state_dict().items()}
    torch.save(sd, tmp_path / "flat.pth")
    assert torch.equal(load_rwkv(tmp_path / "flat.pth").blocks[1].att.time_decay, m.blocks[1].att.time_decay)


def test_missing_key_is_named(tmp_path, random_rwkv):
    sd = dict(random_rwkv(7).state_dict())
    del sd["blocks.1.att.k_a"]
    torch.save(sd, tmp_path / "m.pth")
    with pytest.raises(EdgesmithError, match=r"lacks the key 'blocks.1.att.k_a'"):
        load_rwkv(tmp_path / "m.pth")


def test_wrong_shape_is_named(tmp_path, random_rwkv):
    sd = dict(random_rwkv(6).state_dict())
    sd["blocks.1.ffn.key.weight"] = torch.zeros(10, 64)
    torch.save(sd, tmp_path / "m.pth")
    with pytest.raises(EdgesmithError, match=r"'blocks.1.ffn.key.weight' has shape \(10, 64\)"):
        load_rwkv(tmp_path / "m.pth")


def test_unexpected_key_and_nan_are_rejected(tmp_path, random_rwkv):
    sd = dict(random_rwkv(6).state_dict())
    torch.save({**sd, "optimizer.step": torch.zeros(1)}, tmp_path / "extra.pth")
    with pytest.raises(EdgesmithError, match="unexpected key"):
        load_rwkv(tmp_path / "extra.pth")
    sd["blocks.0.att.time_decay"] = sd["blocks.0.att.time_decay"].clone().fill_(float("nan"))
    torch.save(sd, tmp_path / "nan.pth")
    with pytest.raises(EdgesmithError, match=r"'blocks.0.att.time_decay' contains NaN"):
        load_rwkv(tmp_path / "nan.pth")


def test_truncated_file_and_non_rwkv_checkpoint_are_rejected(tmp_path, random_rwkv):
    save_rwkv(random_rwkv(7), tmp_path / "m.pth")
    data = (tmp_path / "m.pth").read_bytes()
    (tmp_path / "cut.pth").write_bytes(data[: len(data) // 2])
    with pytest.raises(EdgesmithError, match="cannot be read"):
        load_rwkv(tmp_path / "cut.pth")
    torch.save({"emb.weight": torch.zeros(4, 4)}, tmp_path / "other.pth")
    with pytest.raises(EdgesmithError, match="not an RWKV-6 or RWKV-7"):
        load_rwkv(tmp_path / "other.pth")


def test_save_refuses_to_overwrite_without_force(tmp_path, random_rwkv):
    m = random_rwkv(6)
    save_rwkv(m, tmp_path / "m.pth")
    with pytest.raises(EdgesmithError, match="already exists"):
        save_rwkv(m, tmp_path / "m.pth")
    save_rwkv(m, tmp_path / "m.pth", force=True)
