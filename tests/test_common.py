"""common: helpers every package uses; here the one that keeps native libraries' output off the user's terminal."""
from __future__ import annotations

import os

from edgesmith.common import quiet_native_output


def test_quiet_native_output_swallows_descriptor_writes_and_prints_then_restores_both(capfd):
    # C++ code writes to the descriptors themselves (torch's exporter graph dump, TVM's importer warning)
    with quiet_native_output((1, 2)):
        os.write(1, b"native stdout\n")
        os.write(2, b"native stderr\n")
    os.write(1, b"after\n")
    os.write(2, b"err after\n")
    out, err = capfd.readouterr()
    assert out == "after\n" and err == "err after\n"


def test_quiet_native_output_restores_the_descriptors_when_the_block_raises(capfd):
    try:
        with quiet_native_output():
            raise ValueError("reported by the caller")
    except ValueError:
        pass
    os.write(1, b"visible\n")
    assert capfd.readouterr().out == "visible\n"


def test_feeds_slice_each_input_on_its_own_sample_axis():
    import numpy as np

    from edgesmith.common import Feeds, n_samples, sample_slice

    x = Feeds({"input": np.zeros((10, 4)), "state": np.zeros((2, 10, 3))}, {"state": 1})
    part = sample_slice(x, 2, 5)
    assert part["input"].shape == (3, 4) and part["state"].shape == (2, 3, 3)
    assert n_samples(part) == 3 and part.axes == {"state": 1}  # what a later slice needs travels with it
    assert sample_slice({"a": np.zeros((4, 2))}, 0, 1)["a"].shape == (1, 2)  # a plain dict: every axis 0
