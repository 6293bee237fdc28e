"""The C runtime compiles exported C once into a cached library and checks input shapes."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.compress import Artifact, PassContext, run_passes
from edgesmith.compress.export_trees import ExportTreeCConfig
from edgesmith.common import EdgesmithError
from edgesmith.models.gbrl import GBTEnsemble
from edgesmith.runtimes import get_runtime


@pytest.fixture
def c_model(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4)).astype(np.float32)
    ens = GBTEnsemble(4, 2, max_depth=2)
    for _ in range(5):
        ens.fit_step(X, rng.normal(size=(64, 2)))
    art, _ = run_passes(Artifact("trees", module=ens), [ExportTreeCConfig()], PassContext(workdir=tmp_path / "w"))
    return art, ens, X


def test_c_runtime_caches_the_compiled_library(c_model):
    art, ens, X = c_model
    first = get_runtime("c").load(art)
    mtime = first.so_path_.stat().st_mtime_ns
    second = get_runtime("c").load(art)
    assert second.so_path_ == first.so_path_ and second.so_path_.stat().st_mtime_ns == mtime
    np.testing.assert_allclose(second.run(X).outputs, ens.predict(X), rtol=1e-5, atol=1e-6)


def test_c_runtime_rejects_wrong_width(c_model):
    art, _, X = c_model
    with pytest.raises(EdgesmithError, match="takes \\(batch, 4\\)"):
        get_runtime("c").load(Artifact("c", path=art.path)).run(X[:, :3])


def test_trees_runtime_runs_the_engine(c_model):
    _, ens, X = c_model
    out = get_runtime("trees", threads=1).load(Artifact("trees", module=ens)).run(X).outputs
    np.testing.assert_array_equal(out, ens.predict(X))
