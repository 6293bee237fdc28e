"""The founder producer: config validation, reproducibility, the packed input, and one tiny deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
from edgesmith.hardware import PlanOptions
from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError
from edgesmith.models.papers.founder.config import FounderConfig, PolicyConfig


@pytest.fixture(scope="module", autouse=True)
def _own_cache(tmp_path_factory):
    # a fresh cache for this module, so builds here really train and never touch the user's cache
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGESMITH_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def _predict(p):
    return lambda x: p.module(torch.from_numpy(x)).detach().numpy()


def test_configs_round_trip_and_reject_bad_values():
    cfg = FounderConfig.tiny()
    assert FounderConfig.from_dict(json.loads(cfg.to_json())) == cfg
    for bad in (dict(traj_len=1), dict(neg_frac=1.0), dict(emb_dim=0), dict(noise=-1.0)):
        with pytest.raises(EdgesmithError):
            FounderConfig(**bad)
    with pytest.raises(EdgesmithError):
        PolicyConfig(reward="euclidean")


def test_input_shape_packs_current_and_goal_embeddings_without_training():
    p = get_producer("founder")
    assert p.input_shape == (64,) and not hasattr(p, "module_")
    with pytest.raises(EdgesmithError):
        p.check_input(np.zeros((3, 32), np.float32))


def test_build_is_reproducible_from_cache_and_from_scratch():
    a = get_producer("founder", tiny=True, seed=3).build()
    x = a.calibration_data(32)
    assert x.shape == (32, 2 * a.cfg.emb_dim)
    first = _predict(a)(x)
    assert np.array_equal(first, _predict(get_producer("founder", tiny=True, seed=3).build())(x))
    a._cache_path().unlink()
    assert np.array_equal(first, _predict(get_producer("founder", tiny=True, seed=3).build())(x))


def test_evaluation_uses_every_pair_of_free_cells_with_their_bfs_distance():
    p = get_producer("founder", tiny=True)
    x, dist = p.test_pairs()
    assert len(x) == 43 * 43 and dist.min() == 0 and dist.max() == 12
    # a reward that is exactly minus the BFS distance ranks perfectly
    assert p.evaluate(lambda _: -dist.astype(np.float32)).value == pytest.approx(1.0)


def test_tiny_deploy_fp32_row_equals_torch_reference(tmp_path):
    out = deploy(DeployOptions("founder", "host-cpu", tmp_path / "r", plan=PlanOptions(tvm=False),
                               model_options={"tiny": True}, warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref, abs=1e-6)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 0.2
    assert any("outside the graph" in n for n in report["notes"])
