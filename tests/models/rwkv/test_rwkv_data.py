"""stdlib text corpus: byte tokenizer and a train/eval split fixed by file name."""
from __future__ import annotations

import numpy as np

from edgesmith.models.rwkv.data import decode, encode, is_eval_file, load_splits, sequences


def test_byte_tokenizer_round_trips_unicode():
    text = "def f(x):\n    return 'héllo ✓'\n"
    assert decode(encode(text)) == text and encode(text).max() < 256


def test_train_and_eval_files_are_disjoint_and_split_by_name():
    s = load_splits(max_train_bytes=200_000, max_eval_bytes=50_000)
    assert not set(s.train_files) & set(s.eval_files)
    assert all(is_eval_file(f) for f in s.eval_files) and not any(is_eval_file(f) for f in s.train_files)
    assert len(s.train) == 200_000 and len(s.eval) == 50_000
    assert s.fingerprint() == load_splits(max_train_bytes=200_000, max_eval_bytes=50_000).fingerprint()


def test_sequences_fixed_and_random_windows():
    tokens = np.arange(100)
    fixed = sequences(tokens, 10, 3)
    assert fixed.shape == (3, 10) and fixed[1, 0] == 10
    rnd = sequences(tokens, 10, 5, seed=0)
    assert np.array_equal(rnd, sequences(tokens, 10, 5, seed=0))


def test_heldout_windows_follow_the_evaluation_windows_and_never_overlap_them():
    import pytest

    from edgesmith.common import EdgesmithError
    from edgesmith.models import get_producer

    p = get_producer("rwkv7-ref", eval_sequences=4)
    ev, held = p.eval_windows(), p.heldout_windows(3)
    assert held.shape == (3, ev.shape[1])
    # contiguous text: the held-out windows start where the evaluation's end, so no byte is scored twice
    flat = load_splits().eval
    assert np.array_equal(np.concatenate([ev.ravel(), held.ravel()]), flat[: 7 * ev.shape[1]])
    free = len(flat) // ev.shape[1] - 4
    assert len(p.heldout_windows(free)) == free
    for bad in (0, free + 1, True):
        with pytest.raises(EdgesmithError, match="held-out windows"):
            p.heldout_windows(bad)
