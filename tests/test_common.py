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
