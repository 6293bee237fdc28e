"""Registry contract tests, scikit-learn ``check_estimator`` style: every registered kind, pass, runtime,
target and producer goes through the same checks, so a new entry is covered without writing a test.

- kinds: options validate, refuse unknown keys and round-trip through JSON; the speed figure is positive;
- passes: the default config validates and round-trips through JSON; a pass refuses an artifact of the
  wrong format, and a model of the right format it cannot handle, with an ``EdgesmithError`` (never a raw
  exception);
- runtimes: each loads the artifact its ``contract_fixture`` names and returns batch-first float outputs
  with run statistics; it refuses an artifact of another format;
- targets: each plan for a kind the target runs names only registered passes and runtimes, with formats
  that chain from the model's native format to a format the runtime loads; other kinds are refused;
- producers: the tiny version builds, gives finite calibration data of its declared shape and scores
  the reference runtime's predictions with a finite metric.

Model sources (``bench/sources``) have theirs in ``tests/bench/test_source_contracts.py``.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from edgesmith.bench.deploy import predictor, source_artifact
from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, apply_pass, config_from_dict, config_from_json, run_passes
from edgesmith.compress.base import pass_config_type, pass_kinds
from edgesmith.hardware import PlanOptions, get_target, target_names
from edgesmith.models import get_producer, producer_names
from edgesmith.models.kinds import get_kind, kind_names
from edgesmith.runtimes import REFERENCE_RUNTIMES, get_runtime, runtime_names
from edgesmith.runtimes.base import _RUNTIMES


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Compiled kernels and trained tiny models of this module stay out of the shared cache."""
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path_factory.getbasetemp() / "contract-cache"))


# --- kinds -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", kind_names())
def test_kind_options_validate_and_round_trip(name):
    kind = get_kind(name)
    opts = kind.options({})
    assert type(opts).from_dict(json.loads(opts.to_json())) == opts
    with pytest.raises(EdgesmithError, match="no option"):
        kind.options({"no_such_option": 1})
    json.dumps(kind.describe())
    assert kind.unit and kind.default_batch_sizes and kind.default_n_calibration >= 1
    assert kind.export_pass in pass_kinds()


# --- passes ------------------------------------------------------------------------------------------

DIGITS_CALIB = None


@pytest.fixture(scope="module")
def digits():
    return get_producer("digits-mlp", seed=0).build()


@pytest.fixture(scope="module")
def trees_artifact():
    from edgesmith.models.gbrl.ensemble import GBTEnsemble

    rng = np.random.default_rng(1)
    X = rng.normal(size=(128, 6)).astype(np.float32)
    ens = GBTEnsemble(6, 3, lr=[0.1, 0.1, 0.1], bias=[0.5, -1.0, 2.0], max_depth=3)
    for _ in range(10):
        ens.fit_step(X, rng.normal(size=(128, 3)).astype(np.float32) + X[:, :3])
    return Artifact("trees", module=ens, meta={"input_shape": [6]}), X[:3]


@pytest.fixture(scope="module")
def foreign(digits, trees_artifact, tmp_path_factory):
    """A model of each format that no special-purpose pass was written for: the digits MLP, its ONNX
    export, a small tree ensemble."""
    torch_art = source_artifact(digits)
    onnx_art, _ = run_passes(torch_art, [config_from_dict({"kind": "export-onnx"})],
                             PassContext(workdir=tmp_path_factory.mktemp("foreign"), example_input=digits.example_inputs(1)))
    return {"torch": torch_art, "onnx": onnx_art, "trees": trees_artifact[0],
            "nir": _nir_graph(tmp_path_factory.mktemp("foreign_nir"))[0]}


def _nir_graph(tmp_path):
    """A NIR graph (Affine -> LIF -> Linear -> LI) taking the digits' 64 features, written with ``nir``."""
    import nir
    from nir_graphs import chain_graph

    path = tmp_path / "graph.nir"
    nir.write(str(path), chain_graph("LI", n_in=64))
    return Artifact("nir", path=path, meta={"input_shape": [64], "nir": {"dt": 1e-4, "steps": 8}}), \
        np.random.default_rng(0).uniform(0, 1, (3, 64)).astype(np.float32)


@pytest.mark.parametrize("kind", pass_kinds())
def test_pass_config_validates_and_round_trips_through_json(kind):
    cfg = pass_config_type(kind)()
    assert config_from_dict(cfg.to_dict()) == cfg
    assert config_from_json(cfg.to_json()).to_json() == cfg.to_json()
    assert cfg.to_dict()["kind"] == kind


@pytest.mark.parametrize("kind", pass_kinds())
def test_pass_refuses_a_wrong_format_and_a_model_it_cannot_handle_with_a_user_error(kind, foreign, digits, tmp_path):
    cfg = pass_config_type(kind)()
    ctx = PassContext(workdir=tmp_path, calibration=digits.calibration_data(32), example_input=digits.example_inputs(1))
    wrong = next(a for f, a in foreign.items() if f != cfg.input_format)
    with pytest.raises(EdgesmithError, match=kind):
        apply_pass(wrong, cfg, ctx)
    if cfg.input_format in foreign:
        try:
            res = apply_pass(foreign[cfg.input_format], cfg, ctx)
        except EdgesmithError:
            return  # refused with a readable message: the contract holds
        assert res.artifact.format == cfg.output_format
        assert res.report.size_after_bytes > 0


# --- runtimes ----------------------------------------------------------------------------------------


def _lrnn_fixed(tmp_path):
    from edgesmith.compress.lrnn.fixed import ExportLrnnFixedConfig
    from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser

    model = S5Denoiser(S5Config(width=0.25, n_layers=1), seed=0).eval()
    feats = np.abs(np.random.default_rng(0).normal(size=(4, 12, 257))).astype(np.float32)
    art, _ = run_passes(Artifact("torch", module=model), [ExportLrnnFixedConfig()],
                        PassContext(workdir=tmp_path, calibration=feats))
    return art, feats[:2]


def _sigma_delta(tmp_path, digits):
    art, _ = run_passes(source_artifact(digits), [config_from_dict({"kind": "export-netx"})],
                        PassContext(workdir=tmp_path, calibration=digits.calibration_data(64)))
    return art, digits.example_inputs(3)


def _rwkv_c(tmp_path):
    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model

    torch.manual_seed(0)
    model = build_model(RWKVConfig(version=7, n_layer=1, n_embd=64, head_size=16)).eval()
    art, _ = run_passes(Artifact("torch", module=model), [config_from_dict({"kind": "export-rwkv-c", "weights": "int4"})],
                        PassContext(workdir=tmp_path))
    return art, np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]])


FIXTURES = {
    "rwkv-c": lambda tmp, d, f, t: _rwkv_c(tmp),
    "mlp-torch": lambda tmp, d, f, t: (f["torch"], d.example_inputs(3)),
    "mlp-onnx": lambda tmp, d, f, t: (f["onnx"], d.example_inputs(3)),
    "sigma-delta": lambda tmp, d, f, t: _sigma_delta(tmp, d),
    "lrnn-fixed": lambda tmp, d, f, t: _lrnn_fixed(tmp),
    "trees": lambda tmp, d, f, t: t,
    "nir-graph": lambda tmp, d, f, t: _nir_graph(tmp),
    "tree-c": lambda tmp, d, f, t: (run_passes(t[0], [config_from_dict({"kind": "export-tree-c"})],
                                               PassContext(workdir=tmp))[0], t[1]),
}


def _runtime_class(name):
    get_runtime(name)  # imports the backend module (and says why, if it is not available here)
    return _RUNTIMES[name]


@pytest.mark.parametrize("name", runtime_names())
def test_runtime_returns_batch_first_float_outputs_and_run_statistics(name, digits, foreign, trees_artifact, tmp_path):
    cls = _runtime_class(name)
    assert cls.contract_fixture in FIXTURES, f"runtime {name} names no known contract fixture"
    art, x = FIXTURES[cls.contract_fixture](tmp_path, digits, foreign, trees_artifact)
    assert art.format in cls.formats
    res = get_runtime(name, threads=1).load(art).run(x)
    assert isinstance(res.outputs, np.ndarray) and res.outputs.shape[0] == len(x)
    assert res.outputs.dtype == np.float32 and np.all(np.isfinite(res.outputs))
    assert res.stats["runtime"] == name and res.stats["wall_s"] > 0


@pytest.mark.parametrize("name", runtime_names())
def test_runtime_refuses_an_artifact_of_another_format(name, foreign):
    cls = _runtime_class(name)
    other = next(a for f, a in foreign.items() if f not in cls.formats)
    with pytest.raises(EdgesmithError, match=name):
        get_runtime(name).load(other)


# --- targets -----------------------------------------------------------------------------------------


def _producer_of(kind: str):
    return next(p for p in (get_producer(n) for n in producer_names()) if p.kind == kind)


@pytest.mark.parametrize("target", target_names())
def test_target_plans_name_registered_passes_and_runtimes_with_chaining_formats(target):
    t = get_target(target)
    assert set(t.kinds) <= set(kind_names()) and set(t.refused_kinds) <= set(kind_names())
    for kind in kind_names():
        producer = _producer_of(kind)
        if kind not in t.kinds:
            with pytest.raises(EdgesmithError, match=kind):
                t.plan(producer, PlanOptions())
            continue
        plan = t.plan(producer, PlanOptions())
        assert plan.variants, (target, kind)
        for v in plan.variants:
            fmt = producer.native_format
            for cfg in v.passes:
                assert cfg.kind in pass_kinds() and isinstance(cfg, pass_config_type(cfg.kind))
                assert cfg.input_format == fmt, (target, kind, v.name, cfg.kind)
                fmt = cfg.output_format
            assert v.runtimes and all(r in runtime_names() for r in v.runtimes)
            for r in v.runtimes:
                assert fmt in _runtime_class(r).formats, (target, kind, v.name, r)
        json.dumps(plan.to_dict())


def test_every_kind_has_a_target_and_a_producer():
    for kind in kind_names():
        assert any(kind in get_target(t).kinds for t in target_names()), kind
        assert _producer_of(kind).kind == kind


# --- producers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", producer_names())
def test_producer_tiny_build_calibrates_and_scores_its_reference(name):
    cls = type(get_producer(name))
    producer = get_producer(name, seed=0, **cls.tiny_options)
    # a sweep asks for the weight files to key its cells before anything is built: asking must not build
    assert all(isinstance(p, Path) for p in producer.weight_files()) and not hasattr(producer, "module_")
    kind = get_kind(producer.kind)
    kind.check_producer(producer)
    assert producer.native_format in REFERENCE_RUNTIMES
    producer.build()
    calib = producer.calibration_data(4)
    assert 1 <= len(calib) <= 4 and np.all(np.isfinite(calib))
    if not kind.variable_length:
        assert tuple(calib.shape[1:]) == tuple(producer.input_shape)
    assert len(producer.example_inputs(3)) == 3
    art = source_artifact(producer)
    rt = get_runtime(REFERENCE_RUNTIMES[art.format], threads=1).load(art)
    with torch.inference_mode():
        ev = producer.evaluate(predictor(rt, art))
    assert np.isfinite(ev.value) and ev.n_samples > 0
    json.dumps(ev.to_dict())
    assert dataclasses.is_dataclass(kind.options({}))
