import numpy as np
import pytest
import torch

from edgesmith.models import EdgesmithError, get_producer, producer_names


def test_digits_producers_are_registered():
    assert {"digits-mlp", "digits-wide"} <= set(producer_names())


def test_digits_mlp_trains_to_high_accuracy(digits):
    ev = digits.evaluate(lambda x: digits.module(torch.from_numpy(x)).detach().numpy())
    # sklearn digits is easy; a trained 2-hidden-layer MLP that scores below 0.93 means training broke
    assert ev.value > 0.93
    assert ev.n_samples == 360


def test_training_is_reproducible_for_a_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))  # train twice for real, no cache hit
    a = get_producer("digits-mlp", seed=3).build().module
    for f in (tmp_path / "models").glob("*.pt"):
        f.unlink()
    b = get_producer("digits-mlp", seed=3).build().module
    for ta, tb in zip(a.state_dict().values(), b.state_dict().values()):
        assert torch.equal(ta, tb)


def test_calibration_data_comes_from_training_split_only(digits):
    cal = digits.calibration_data(10_000)
    x_te, _ = digits.test_data()
    train_rows = {r.tobytes() for r in digits._split()[0]}
    assert all(r.tobytes() in train_rows for r in cal)
    assert len(cal) == len(digits._split()[0])
    assert cal.dtype == np.float32 and np.isfinite(cal).all()


def test_wrong_input_shape_is_rejected_with_a_clear_error(digits):
    with pytest.raises(EdgesmithError, match="expects"):
        digits.check_input(np.zeros((2, 63), np.float32))


def test_unknown_model_names_the_known_ones():
    with pytest.raises(EdgesmithError, match="digits-mlp"):
        get_producer("no-such-model")


def test_cached_weights_equal_freshly_trained_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    fresh = get_producer("digits-mlp", seed=5).build()
    assert len(list((tmp_path / "models").glob("digits-mlp-seed5-*.pt"))) == 1
    again = get_producer("digits-mlp", seed=5).build()  # loaded from the cache this time
    for ta, tb in zip(fresh.module.state_dict().values(), again.module.state_dict().values()):
        assert torch.equal(ta, tb)


def test_damaged_cache_entry_is_retrained_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    ref = get_producer("digits-mlp", seed=6).build().module
    entry = next((tmp_path / "models").glob("digits-mlp-seed6-*.pt"))
    entry.write_bytes(b"garbage")
    rebuilt = get_producer("digits-mlp", seed=6).build().module
    for ta, tb in zip(ref.state_dict().values(), rebuilt.state_dict().values()):
        assert torch.equal(ta, tb)
