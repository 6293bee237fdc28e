"""MedTok's defining mechanics: codebook partition, soft top-5 weights, straight-through gradient, losses."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.medtok.data import Ontology, OntologyConfig
from edgesmith.models.papers.medtok.tokenizer import MedTokTokenizer, TextVQTokenizer, TokenizerConfig, augment, soft_topk_quantize

TINY_TOK = TokenizerConfig(d_model=16, code_dim=8, codebook_size=48)


@pytest.fixture(scope="module")
def onto():
    return Ontology(OntologyConfig.tiny())


@pytest.fixture(scope="module")
def tokenizer(onto):
    torch.manual_seed(0)
    return MedTokTokenizer(onto.cfg, TINY_TOK).eval()


def test_each_path_only_uses_its_codebook_third(onto, tokenizer):
    with torch.no_grad():
        _, ids, _ = tokenizer(torch.from_numpy(onto.code_inputs()))
    third = TINY_TOK.codebook_size // 3
    text, graph, shared = ids[:, 0], ids[:, 1], ids[:, 2:]
    assert text.min() >= 0 and text.max() < third
    assert graph.min() >= 2 * third and graph.max() < 3 * third
    assert shared.min() >= third and shared.max() < 2 * third


def test_graph_specific_codes_ignore_the_text_and_vice_versa(onto, tokenizer):
    # the specific paths see one modality only: changing the other must not move their assignment
    x = torch.from_numpy(onto.code_inputs())
    x_text_changed = x.clone()
    x_text_changed[:, : onto.cfg.desc_len] = torch.flip(x[:, : onto.cfg.desc_len], dims=[0])
    x_graph_changed = x.clone()
    x_graph_changed[:, onto.cfg.desc_len :] = torch.flip(x[:, onto.cfg.desc_len :], dims=[0])
    with torch.no_grad():
        ids = tokenizer(x)[1]
        assert torch.equal(tokenizer(x_text_changed)[1][:, 1], ids[:, 1])
        assert torch.equal(tokenizer(x_graph_changed)[1][:, 0], ids[:, 0])


def test_soft_top5_weights_are_a_softmax_of_negative_distances_summing_to_one():
    torch.manual_seed(1)
    z, cb = torch.randn(7, 8), torch.randn(20, 8)
    _, zq, idx, w, zn = soft_topk_quantize(z, cb, 5)
    assert idx.shape == w.shape == (7, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(7))
    cbn = cb / cb.norm(dim=-1, keepdim=True)
    d = torch.cdist(zn, cbn) ** 2
    nearest = torch.topk(-d, 5).indices
    assert torch.equal(torch.sort(idx, -1).values, torch.sort(nearest, -1).values)
    torch.testing.assert_close(w, torch.softmax(-torch.gather(d, 1, idx), -1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(zq, (w.unsqueeze(-1) * cbn[idx]).sum(1))


def test_straight_through_gradient_reaches_encoder_unchanged():
    torch.manual_seed(2)
    z = torch.randn(4, 8, requires_grad=True)
    st, zq, _, _, zn = soft_topk_quantize(z, torch.randn(12, 8), 5)
    zn.retain_grad()
    upstream = torch.randn(4, 8)
    (st * upstream).sum().backward()
    torch.testing.assert_close(zn.grad, upstream)  # d loss / d z_enc == d loss / d z_q
    torch.testing.assert_close(st, zq)  # forward value is the quantized vector


def test_training_losses_are_finite_and_reach_every_part(onto):
    torch.manual_seed(3)
    tok = MedTokTokenizer(onto.cfg, TINY_TOK)
    x = torch.from_numpy(onto.code_inputs())[:16]
    loss, parts = tok.loss(x, augment(x, onto.cfg, torch.Generator().manual_seed(0)))
    assert set(parts) == {"vq", "shared", "specific", "orth"} and all(np.isfinite(v) for v in parts.values())
    loss.backward()
    for name in ("text.emb.weight", "graph.w1.weight", "cross_t.0.q.weight", "cross_g.1.v.weight", "codebook"):
        assert dict(tok.named_parameters())[name].grad.abs().sum() > 0, name


def test_text_baseline_uses_one_codebook_of_the_same_width(onto):
    tok = TextVQTokenizer(onto.cfg, TINY_TOK).eval()
    with torch.no_grad():
        emb, ids, w = tok(torch.from_numpy(onto.code_inputs()))
    assert emb.shape[1] == MedTokTokenizer(onto.cfg, TINY_TOK).out_dim
    assert ids.shape[1:] == (1, 5) and ids.max() < TINY_TOK.codebook_size


def test_bad_configs_are_user_errors():
    with pytest.raises(EdgesmithError, match="codebook_size"):
        TokenizerConfig(codebook_size=50)
    with pytest.raises(EdgesmithError, match="p_group_word"):
        OntologyConfig(p_group_word=1.5)
    with pytest.raises(EdgesmithError, match="split"):
        Ontology(OntologyConfig.tiny()).patients("validation")
