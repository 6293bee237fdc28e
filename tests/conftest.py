"""Shared fixtures: one trained digits model and its fp32 ONNX export per test session."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.export_onnx import ExportOnnxConfig
from edgesmith.models import get_producer


@pytest.fixture(scope="session")
def digits():
    """The trained digits-mlp producer (training takes a few seconds, so it is shared)."""
    return get_producer("digits-mlp", seed=0).build()


@pytest.fixture(scope="session")
def digits_torch(digits) -> Artifact:
    return Artifact("torch", module=digits.module, meta={"input_shape": list(digits.input_shape)})


@pytest.fixture(scope="session")
def digits_onnx(digits, digits_torch, tmp_path_factory) -> Artifact:
    """fp32 ONNX export of digits-mlp (Linear layers as MatMul + Add, dynamic batch)."""
    ctx = PassContext(workdir=tmp_path_factory.mktemp("digits_onnx"), calibration=digits.calibration_data(),
                      example_input=digits.example_inputs(1))
    art, _ = run_passes(digits_torch, [ExportOnnxConfig()], ctx)
    return art


@pytest.fixture
def rng():
    return np.random.default_rng(0)
