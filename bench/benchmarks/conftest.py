"""Session fixtures for the pytest-benchmark suite (``make benchmark``): models are built once.

The same pattern as ``tests/conftest.py``, kept separate because benchmarks must not import from
``tests/``. At the end of the session the onnxruntime precision medians are turned into the
speed-up table (int8 / fp32 at batch 64 is the headline).
"""
from __future__ import annotations

import pytest

from edgesmith.bench.studies.int8_speedup import PRECISIONS, build_precision_variants
from edgesmith.compress import Artifact, PassContext
from edgesmith.models import get_producer

MEDIANS = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def wide():
    """The trained digits-wide producer (64-1024-1024-1024-10)."""
    return get_producer("digits-wide", seed=0).build()


@pytest.fixture(scope="session")
def wide_torch(wide) -> Artifact:
    return Artifact("torch", module=wide.module, meta={"input_shape": list(wide.input_shape)})


@pytest.fixture(scope="session")
def wide_variants(wide, tmp_path_factory) -> dict[str, Artifact]:
    """fp32, int8 QDQ and int4 MatMulNBits ONNX models of digits-wide."""
    return build_precision_variants(wide, tmp_path_factory.mktemp("digits_wide"))


@pytest.fixture
def wide_ctx(wide, tmp_path) -> PassContext:
    return PassContext(workdir=tmp_path, calibration=wide.calibration_data(), example_input=wide.example_inputs(1),
                       seed=0, progress=False)


@pytest.fixture(scope="session")
def precision_medians(pytestconfig) -> dict:
    """(precision, batch) -> median seconds per call, filled by the precision benchmarks."""
    return pytestconfig.stash.setdefault(MEDIANS, {})


def pytest_terminal_summary(terminalreporter, config):
    medians = config.stash.get(MEDIANS, {})
    batches = sorted({b for _, b in medians})
    rows = []
    for b in batches:
        base = medians.get(("fp32", b))
        for p in PRECISIONS:
            if base and (p, b) in medians:
                rows.append(f"| {b} | {p} | {medians[(p, b)] * 1e3:.4f} | {base / medians[(p, b)]:.2f}x |")
    if rows:
        terminalreporter.write_sep("-", "onnxruntime digits-wide, 2 threads, in-process pytest-benchmark medians")
        for line in ["| batch | precision | median (ms) | speed-up vs fp32 |", "|---:|---|---:|---:|", *rows]:
            terminalreporter.write_line(line)
