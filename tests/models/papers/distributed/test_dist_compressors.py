"""Compressors and error feedback on hand-made tensors (no processes)."""
from __future__ import annotations

import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.distributed.compressors import ErrorFeedback, Identity, Quantize, TopK, make_compressor


def test_ef14_error_buffer_holds_exactly_what_top_k_did_not_send():
    ef = ErrorFeedback(TopK(0.25), "ef14")
    m, _ = ef.message("b", torch.tensor([3.0, -1.0, 0.5, 2.0]))
    assert m.tolist() == [3.0, 0.0, 0.0, 0.0]
    assert ef.error["b"].tolist() == [0.0, -1.0, 0.5, 2.0]
    # a zero input sends the largest remembered entry next, so nothing is lost for good
    m, _ = ef.message("b", torch.zeros(4))
    assert m.tolist() == [0.0, 0.0, 0.0, 2.0]
    assert ef.error["b"].tolist() == [0.0, -1.0, 0.5, 0.0]


def test_ef21_receiver_estimate_tracks_the_mean_input():
    ef = ErrorFeedback(TopK(0.5), "ef21")
    x = torch.tensor([4.0, -3.0, 1.0, 0.5])
    for _ in range(3):  # a constant input is fully learnt after enough compressed differences
        m, _ = ef.message("k", x)
        est = ef.combine("k", m)
    assert torch.equal(est, x) and torch.equal(ef.local["k"], x)


def test_no_feedback_sends_the_plain_compression_every_time():
    ef = ErrorFeedback(TopK(0.25), "none")
    for _ in range(2):
        m, _ = ef.message("k", torch.tensor([3.0, -1.0, 0.5, 2.0]))
        assert m.tolist() == [3.0, 0.0, 0.0, 0.0]
    assert not ef.error


def test_payload_bytes_are_what_goes_on_the_wire():
    assert Identity().payload_bytes(250) == 1000
    assert TopK(0.1).payload_bytes(250) == 25 * 4 + 25 * 4  # float32 values + int32 indices
    assert Quantize(4).payload_bytes(250) == 4 + 125  # scale + two 4-bit codes per byte
    assert Quantize(2).payload_bytes(250) == 4 + 63


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_deterministic_quantization_round_trips_grid_points(bits):
    q = Quantize(bits, stochastic=False)
    levels = (1 << bits) - 1
    grid = torch.linspace(-1.0, 1.0, levels + 1)
    assert torch.allclose(q.apply(grid), grid, atol=1e-6)


def test_stochastic_quantization_is_unbiased():
    q = Quantize(2, stochastic=True)
    x = torch.tensor([0.9, -0.2, 0.37, -1.0, 0.05])
    g = torch.Generator().manual_seed(0)
    mean = torch.stack([q.apply(x, g) for _ in range(1000)]).mean(0)
    assert torch.allclose(mean, x, atol=0.05)


def test_bad_compressor_specs_are_user_errors():
    for spec in ("topk:0", "topk:1.5", "quant:3", "zip", "quant:4:maybe"):
        with pytest.raises(EdgesmithError):
            make_compressor(spec)
    with pytest.raises(EdgesmithError, match="error-feedback"):
        ErrorFeedback(Identity(), "ef99")
