"""The DDP hook and the launcher, on 2 gloo processes started by torchrun."""
from __future__ import annotations

import pytest

from edgesmith.common import EdgesmithError
from edgesmith.models.distributed import launch


def test_hook_matches_plain_ddp_and_top_k_error_buffer_is_exact():
    res = launch("edgesmith.models.distributed.selftest", {"topk": 0.25}, nproc=2, timeout_s=300)
    r = res.result
    assert r["grad_norm"] > 0.1  # the check is not vacuous
    assert r["identity_vs_plain_max_abs"] < 1e-7
    assert r["hooked_vs_mean_topk_max_abs"] < 1e-7
    assert r["error_vs_unsent_max_abs"] == 0.0
    assert r["error_nonzero"] == r["unsent_entries"]
    comm = res.communication
    assert comm["processes"] == 2 and comm["backend"] == "gloo"
    assert comm["bytes_sent_total"] == 2 * comm["bytes_sent_per_worker"] > 0


def test_failing_worker_is_a_readable_user_error():
    # the worker refuses a config whose worker count differs from the process count
    from edgesmith.models.eflanding.config import EFLandingConfig

    with pytest.raises(EdgesmithError, match="3 workers"):
        launch("edgesmith.models.eflanding.worker", {"runs": [EFLandingConfig(workers=3, iters=2).to_dict()]}, nproc=2,
               timeout_s=300)


def test_bad_process_count_and_backend_are_rejected_before_starting():
    with pytest.raises(EdgesmithError, match="positive"):
        launch("edgesmith.models.distributed.selftest", {}, nproc=0)
    with pytest.raises(EdgesmithError, match="backend"):
        launch("edgesmith.models.distributed.selftest", {}, nproc=1, backend="mpi")
