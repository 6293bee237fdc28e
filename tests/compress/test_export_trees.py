"""Tree-ensemble exports: ONNX and C outputs equal the engine's (C fixed point within its bound)."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.compress import Artifact, PassContext, apply_pass, config_from_json, run_passes
from edgesmith.compress.export_trees import ExportTreeCConfig, ExportTreeOnnxConfig
from edgesmith.common import EdgesmithError
from edgesmith.models.gbrl import GBTEnsemble
from edgesmith.runtimes import get_runtime


@pytest.fixture(scope="module", params=["greedy", "oblivious"])
def trees(request):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(256, 6)).astype(np.float32)
    ens = GBTEnsemble(6, 3, grow_policy=request.param, lr=[0.1, 0.1, 0.02], bias=[0.5, -1.0, 2.0], max_depth=3)
    for _ in range(40):
        ens.fit_step(X, rng.normal(size=(256, 3)).astype(np.float32) + X[:, :3])
    return Artifact("trees", module=ens, meta={"input_shape": [6]}), X


def test_trees_artifact_reports_ensemble_bytes(trees):
    art, _ = trees
    assert art.size_bytes() == art.module.size_bytes() > 0
    with pytest.raises(ValueError, match="needs a module"):
        Artifact("trees")


def test_onnx_export_runs_in_onnxruntime_and_matches_engine(trees, tmp_path):
    art, X = trees
    onnx_art, reports = run_passes(art, [ExportTreeOnnxConfig()], PassContext(workdir=tmp_path))
    assert onnx_art.format == "onnx" and reports[0].output_format == "onnx"
    y = get_runtime("onnxruntime", threads=1).load(onnx_art).run(X).outputs
    np.testing.assert_allclose(y, art.module.predict(X), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("leaves", ["float", "int8", "int16"])
def test_c_export_compiles_and_stays_within_stated_error(trees, tmp_path, leaves):
    art, X = trees
    c_art, reports = run_passes(art, [ExportTreeCConfig(leaves=leaves)], PassContext(workdir=tmp_path))
    bound = np.array(c_art.meta["c_error_bound"])
    err = np.abs(get_runtime("c").load(c_art).run(X).outputs - art.module.predict(X)).max(axis=0)
    assert np.all(err <= bound + 1e-6)
    assert reports[0].extra["error_bound"] == bound.tolist()
    if leaves != "float":  # rounding errors cancel: the typical error sits well inside the worst case
        assert err.max() < 0.5 * bound.max()


def test_int16_leaves_are_much_closer_than_int8(trees, tmp_path):
    art, X = trees
    errs = {}
    for leaves in ("int8", "int16"):
        c_art, _ = run_passes(art, [ExportTreeCConfig(leaves=leaves)], PassContext(workdir=tmp_path / leaves))
        errs[leaves] = np.abs(get_runtime("c").load(c_art).run(X).outputs - art.module.predict(X)).max()
    assert errs["int16"] < errs["int8"] / 50


def test_configs_validate_and_round_trip_through_json():
    cfg = ExportTreeCConfig(leaves="int16")
    assert config_from_json(cfg.to_json()) == cfg
    assert config_from_json(ExportTreeOnnxConfig(opset=18).to_json()) == ExportTreeOnnxConfig(opset=18)
    with pytest.raises(EdgesmithError, match="leaves"):
        ExportTreeCConfig(leaves="int4")


def test_tree_exports_refuse_other_formats_and_empty_ensembles(tmp_path):
    import torch

    with pytest.raises(EdgesmithError, match="takes a trees model"):
        apply_pass(Artifact("torch", module=torch.nn.Linear(2, 2)), ExportTreeCConfig(), PassContext(workdir=tmp_path))
    empty = Artifact("trees", module=GBTEnsemble(3, 2))
    with pytest.raises(EdgesmithError, match="no trees"):
        apply_pass(empty, ExportTreeOnnxConfig(), PassContext(workdir=tmp_path))
