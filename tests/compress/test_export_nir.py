"""export-nir: a dense ReLU network written as a rate-coded NIR graph, read back and run."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.export_nir import ExportNirConfig
from edgesmith.compress.nir_graph import load_chain, simulate_float


@pytest.fixture(scope="module")
def exported(digits, tmp_path_factory):
    art = Artifact("torch", module=digits.module, meta={"input_shape": [64]})
    out, reports = run_passes(art, [ExportNirConfig(steps=32)],
                              PassContext(workdir=tmp_path_factory.mktemp("nir_out"), calibration=digits.calibration_data()))
    return out, reports[0]


def test_the_graph_reads_back_with_nir_and_holds_the_models_weights(exported, digits):
    import nir

    out, report = exported
    graph = nir.read(str(out.path))
    assert [type(graph.nodes[k]).__name__ for k in ("fc0", "if0", "fc1", "if1", "fc2", "readout2")] == \
        ["Affine", "IF", "Affine", "IF", "Affine", "I"]
    meta = graph.metadata["edgesmith"]
    thetas = report.extra["thresholds"]
    assert meta["steps"] == 32 and np.allclose(meta["thresholds"], thetas)
    linears = [m for m in digits.module.modules() if isinstance(m, torch.nn.Linear)]
    # a spike of layer l carries theta_l of activation: the next layer's weights are scaled by it
    np.testing.assert_allclose(graph.nodes["fc1"].weight, linears[1].weight.detach().double().numpy() * thetas[0])
    np.testing.assert_allclose(graph.nodes["fc0"].bias, linears[0].bias.detach().double().numpy())


def test_its_float_semantics_classify_like_the_torch_model(exported, digits):
    out, _ = exported
    x, y = digits.test_data()
    sim, _ = simulate_float(load_chain(out.path), x, 1e-4, 32)
    with torch.no_grad():
        fp32 = digits.module(torch.from_numpy(x)).numpy()
    assert np.mean(sim.argmax(1) == y) >= np.mean(fp32.argmax(1) == y) - 0.03  # rate coding costs little here


def test_a_network_ending_in_relu_is_refused(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    with pytest.raises(EdgesmithError, match="readout"):
        run_passes(Artifact("torch", module=m, meta={"input_shape": [4]}), [ExportNirConfig()],
                   PassContext(workdir=tmp_path, calibration=np.ones((8, 4), np.float32)))
