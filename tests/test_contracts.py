"""Registry contract tests, scikit-learn ``check_estimator`` style: every registered kind, pass, runtime, target
and producer goes through the public checks of ``edgesmith.testing`` (what each checks is listed there), so a new
entry is covered without writing a test, and a plugin author runs the same checks on theirs.

Model sources (``bench/sources``) have theirs in ``tests/bench/test_source_contracts.py``.
"""
from __future__ import annotations

import pytest

from edgesmith import testing
from edgesmith.common import EdgesmithError
from edgesmith.compress.base import pass_kinds
from edgesmith.hardware import get_target, target_names
from edgesmith.models import producer_names
from edgesmith.models.kinds import get_kind, kind_names
from edgesmith.runtimes import runtime_names


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Compiled kernels and trained tiny models of this module stay out of the shared cache."""
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path_factory.getbasetemp() / "contract-cache"))


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return testing.Fixtures(tmp_path_factory.mktemp("contract-fixtures"))


@pytest.mark.parametrize("name", kind_names())
def test_kind_meets_its_contract(name):
    testing.check_kind(name)


@pytest.mark.parametrize("kind", pass_kinds())
def test_pass_meets_its_contract(kind, fixtures, tmp_path):
    testing.check_pass(kind, tmp_path, fixtures)


@pytest.mark.parametrize("name", runtime_names())
def test_runtime_meets_its_contract(name, fixtures, tmp_path):
    testing.check_runtime(name, tmp_path, fixtures)


@pytest.mark.parametrize("target", target_names())
def test_target_meets_its_contract(target):
    testing.check_target(target)


def test_every_kind_has_a_target_and_a_producer():
    for kind in kind_names():
        assert any(kind in get_target(t).kinds for t in target_names()), kind
        assert testing.producer_of(kind).kind == kind


@pytest.mark.parametrize("name", producer_names())
def test_producer_meets_its_contract(name):
    testing.check_producer(name)


# --- the checks themselves can fail ---------------------------------------------------------------------


def test_a_kind_whose_speed_figure_ignores_the_time_breaks_its_contract(monkeypatch):
    kind = get_kind("tensor")
    same = kind.speed(1e-3, 2, testing.producer_of("tensor"), None)
    monkeypatch.setattr(type(kind), "speed", lambda self, p50_s, batch, producer, artifact: same)
    with pytest.raises(testing.ContractError, match="twice as long"):
        testing.check_kind("tensor")


def test_a_pass_that_refuses_every_input_breaks_its_contract(monkeypatch, fixtures, tmp_path):
    from edgesmith.compress import base

    cfg_type = base.pass_config_type("prune-magnitude")

    def refuse(artifact, config, ctx):
        raise EdgesmithError("prune-magnitude refuses everything.", "nothing to do.")

    monkeypatch.setitem(base._HANDLERS, cfg_type, refuse)
    with pytest.raises(testing.ContractError, match="refused it"):
        testing.check_pass("prune-magnitude", tmp_path, fixtures)


def test_a_runtime_that_returns_nan_breaks_its_contract(monkeypatch, fixtures, tmp_path):
    import numpy as np

    from edgesmith.runtimes.base import RUNTIMES

    cls = RUNTIMES.get("torch")
    real = cls.run

    def nan_run(self, x):
        res = real(self, x)
        res.outputs[:] = np.nan
        return res

    monkeypatch.setattr(cls, "run", nan_run)
    with pytest.raises(testing.ContractError, match="finite float32"):
        testing.check_runtime("torch", tmp_path, fixtures)
