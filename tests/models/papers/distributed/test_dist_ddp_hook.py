"""The DDP hook and the launcher, on 2 gloo processes started by torchrun."""
from __future__ import annotations

import pytest

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.distributed import launch


def test_hook_matches_plain_ddp_and_top_k_error_buffer_is_exact():
    res = launch("edgesmith.models.papers.distributed.selftest", {"topk": 0.25}, nproc=2, timeout_s=300)
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
    from edgesmith.models.papers.eflanding.config import EFLandingConfig

    with pytest.raises(EdgesmithError, match="3 workers"):
        launch("edgesmith.models.papers.eflanding.worker", {"runs": [EFLandingConfig(workers=3, iters=2).to_dict()]}, nproc=2,
               timeout_s=300)


def test_a_worker_lost_without_an_exception_gets_one_more_run(tmp_path):
    res = launch("edgesmith.models.papers.distributed.selftest", {"lose_rank1": f"once:{tmp_path / 'lost'}"}, nproc=2,
                 timeout_s=300)
    assert res.restarts == 1 and res.to_dict()["restarts"] == 1
    assert res.result["identity_vs_plain_max_abs"] < 1e-7  # the second run did the whole job


def test_a_worker_lost_twice_names_the_exit_code_and_keeps_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(EdgesmithError, match="exitcode") as info:
        launch("edgesmith.models.papers.distributed.selftest", {"lose_rank1": "always"}, nproc=2, timeout_s=300)
    logs = list((tmp_path / "cache" / "logs").glob("torchrun-*.log"))
    assert len(logs) == 1 and str(logs[0]) in str(info.value)
    assert "exitcode" in logs[0].read_text()


def test_a_python_exception_is_not_retried(tmp_path, monkeypatch):
    # a worker's exception is deterministic (a bad setting): running it again would only double the wait
    import importlib

    mod = importlib.import_module("edgesmith.models.papers.distributed.launch")
    runs = []
    real = mod._run
    monkeypatch.setattr(mod, "_run", lambda *a: runs.append(1) or real(*a))
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(EdgesmithError, match="outside"):
        launch("edgesmith.models.papers.distributed.selftest", {"topk": -1}, nproc=2, timeout_s=300)
    assert len(runs) == 1


def test_bad_process_count_and_backend_are_rejected_before_starting():
    with pytest.raises(EdgesmithError, match="positive"):
        launch("edgesmith.models.papers.distributed.selftest", {}, nproc=0)
    with pytest.raises(EdgesmithError, match="backend"):
        launch("edgesmith.models.papers.distributed.selftest", {}, nproc=1, backend="mpi")


def test_a_peers_dropped_connection_error_counts_as_a_lost_worker_not_as_its_own_exception():
    # seen in CI: rank 1 vanished while rank 0 was still connecting, and rank 0 raised gloo's error before
    # torchrun stopped it; retrying is right, and a worker's own exception still wins over such a line
    from edgesmith.models.papers.distributed.launch import _lost_without_exception, _python_error

    peer = ("[rank0]: RuntimeError: Gloo connectFullMesh failed with [../pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:28046\nexitcode  : 3 (pid: 12)\n")
    assert _lost_without_exception(peer)
    assert _lost_without_exception("exitcode  : -9 (pid: 12)\n")
    own = peer + "[rank1]: ValueError: topk -1 is outside (0, 1]\n"
    assert not _lost_without_exception(own)
    assert _python_error(own).startswith("[rank1]: ValueError")
