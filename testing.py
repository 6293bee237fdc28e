"""Contract checks for every registry, in the spirit of scikit-learn's ``check_estimator``: the checks the project
runs on its own kinds, passes, runtimes, targets and producers, for a plugin author to run on theirs::

    from edgesmith import testing

    testing.check_kind("my-kind")
    testing.check_pass("my-pass", workdir)        # workdir: a scratch folder (pytest's tmp_path)
    testing.check_runtime("my-runtime", workdir)
    testing.check_target("my-target")
    testing.check_producer("my-producer")

Each returns None or raises ``ContractError`` (an ``AssertionError``) naming the entry and what it broke.
``tests/test_contracts.py`` runs them on every registered entry. What each checks:

- a kind: its options validate, refuse unknown keys and round-trip through JSON; it has a unit, batch sizes, a
  calibration count and an export pass; its speed figure is finite, positive and worse for a slower call;
- a pass: its default config validates and round-trips through JSON; it refuses an artifact of another format
  with an ``EdgesmithError`` naming it; and it transforms the model of its format it declares (``contract_fixture``
  on the config class; the digits MLP, its ONNX export, a small tree ensemble or a NIR graph by default) into
  an artifact of its output format: a pass that refuses every input fails;
- a runtime: it runs its ``contract_fixture`` and returns batch-first finite float32 outputs and run statistics,
  and refuses an artifact of another format (a benchmark peer's backend whose package is not installed, such as
  OpenVINO without the ``peer`` extra, must instead refuse to start with a message naming that extra);
- a target: every plan for a kind it runs names registered passes and runtimes whose formats chain from the
  producer's to the runtime's; other kinds are refused;
- a producer: the tiny version builds without being asked to by ``weight_files``, calibrates with finite data of
  its declared shape and scores the reference runtime's predictions with a finite metric.
"""
from __future__ import annotations

import dataclasses
import json
import math
from functools import cached_property
from pathlib import Path

import numpy as np

__all__ = ["ContractError", "check_kind", "check_pass", "check_runtime", "check_target", "check_producer",
           "Fixtures"]


class ContractError(AssertionError):
    """An entry of a registry broke its contract: the message names the entry and the rule."""


def _require(ok, entry: str, rule: str) -> None:
    if not ok:
        raise ContractError(f"{entry}: {rule}")


def _refuses(fn, entry: str, rule: str, match: str | None = None) -> None:
    """``fn()`` must raise an EdgesmithError (whose message names ``match``), not a raw exception."""
    from edgesmith.common import EdgesmithError

    try:
        fn()
    except EdgesmithError as e:
        _require(match is None or match in str(e), entry, f"{rule}; its message does not name {match!r}: {e}")
        return
    except Exception as e:  # a raw exception is a broken contract, reported as such
        raise ContractError(f"{entry}: {rule}, but it raised {type(e).__name__}: {e}") from e
    raise ContractError(f"{entry}: {rule}, but it did not refuse")


# --- the models every check runs on ----------------------------------------------------------------------------


class Fixtures:
    """Small models of each format, built once per ``workdir`` on first use: ``artifact(name) -> (artifact, x)``
    for the runtimes' and passes' ``contract_fixture`` names, ``foreign[format]`` for a model of each format that
    no special-purpose pass was written for, and ``pass_context(name)``."""

    def __init__(self, workdir: str | Path):
        self.workdir = Path(workdir)
        self._made: dict = {}

    def _dir(self, name: str) -> Path:
        d = self.workdir / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    @cached_property
    def digits(self):
        from edgesmith.models import get_producer

        return get_producer("digits-mlp", seed=0).build()

    @cached_property
    def trees(self):
        from edgesmith.compress import Artifact
        from edgesmith.models.gbrl.ensemble import GBTEnsemble

        rng = np.random.default_rng(1)
        x = rng.normal(size=(128, 6)).astype(np.float32)
        ens = GBTEnsemble(6, 3, lr=[0.1, 0.1, 0.1], bias=[0.5, -1.0, 2.0], max_depth=3)
        for _ in range(10):
            ens.fit_step(x, rng.normal(size=(128, 3)).astype(np.float32) + x[:, :3])
        return Artifact("trees", module=ens, meta={"input_shape": [6]}), x[:3]

    @cached_property
    def foreign(self) -> dict:
        from edgesmith.bench.pipeline.deploy import source_artifact
        from edgesmith.compress import PassContext, config_from_dict, run_passes

        torch_art = source_artifact(self.digits)
        onnx_art, _ = run_passes(torch_art, [config_from_dict({"kind": "export-onnx"})],
                                 PassContext(workdir=self._dir("foreign"), example_input=self.digits.example_inputs(1)))
        return {"torch": torch_art, "onnx": onnx_art, "trees": self.trees[0], "nir": self.artifact("nir-graph")[0]}

    def artifact(self, name: str):
        """(artifact, inputs) of the fixture ``name``."""
        if name not in self._made:
            make = FIXTURES.get(name)
            _require(make is not None, name, f"is not a contract fixture; use one of {', '.join(sorted(FIXTURES))}")
            self._made[name] = make(self, self._dir(name))
        return self._made[name]

    def pass_context(self, name: str, kind: str):
        """The PassContext a pass's contract fixture is run with (calibration of that model, its training data)."""
        from edgesmith.compress import PassContext

        art, x = self.artifact(name) if name else (None, self.digits.example_inputs(1))
        extra = CONTEXTS.get(name, lambda fx: {"calibration": fx.digits.calibration_data(32),
                                                "example_input": fx.digits.example_inputs(1)})(self)
        return PassContext(workdir=self._dir(f"pass-{kind}"), **extra)


def write_nir_chain(path: Path, n_in: int, hidden: int, n_out: int = 4) -> np.random.Generator:
    """Input -> Affine -> LIF -> Linear -> LI -> Output, written with ``nir`` (weights drawn from seed 0); returns the
    generator, for inputs drawn after the weights."""
    import nir

    rng = np.random.default_rng(0)
    dt, tau = 1e-4, 1e-3
    nodes = {"input": nir.Input(input_type={"input": np.array([n_in])}),
             "fc1": nir.Affine(weight=rng.normal(0, 0.3, (hidden, n_in)), bias=rng.normal(0, 0.05, hidden)),
             "lif1": nir.LIF(tau=np.full(hidden, tau), r=np.full(hidden, tau / dt), v_leak=np.zeros(hidden),
                             v_threshold=np.ones(hidden), v_reset=np.zeros(hidden)),
             "fc2": nir.Linear(weight=rng.normal(0, 0.3, (n_out, hidden))),
             "readout": nir.LI(tau=np.full(n_out, tau), r=np.full(n_out, tau / dt), v_leak=np.zeros(n_out)),
             "output": nir.Output(output_type={"output": np.array([n_out])})}
    edges = [("input", "fc1"), ("fc1", "lif1"), ("lif1", "fc2"), ("fc2", "readout"), ("readout", "output")]
    nir.write(str(path), nir.NIRGraph(nodes=nodes, edges=edges))
    return rng


def _nir_graph(fx: Fixtures, d: Path):
    """A NIR chain on the digits' 64 features."""
    from edgesmith.compress import Artifact

    rng = write_nir_chain(d / "graph.nir", 64, 20)
    return (Artifact("nir", path=d / "graph.nir", meta={"input_shape": [64], "nir": {"dt": 1e-4, "steps": 8}}),
            rng.uniform(0, 1, (3, 64)).astype(np.float32))


def _s5(fx: Fixtures, d: Path):
    from edgesmith.compress import Artifact
    from edgesmith.models.lrnn.s5 import S5Config, S5Denoiser

    model = S5Denoiser(S5Config(width=0.25, n_layers=1), seed=0).eval()
    return Artifact("torch", module=model), _s5_features()[:2]


def _s5_features() -> np.ndarray:
    return np.abs(np.random.default_rng(0).normal(size=(4, 12, 257))).astype(np.float32)


def _lrnn_fixed(fx: Fixtures, d: Path):
    from edgesmith.compress import PassContext, run_passes
    from edgesmith.compress.lrnn.fixed import ExportLrnnFixedConfig

    art, _ = run_passes(fx.artifact("s5-torch")[0], [ExportLrnnFixedConfig()],
                        PassContext(workdir=d, calibration=_s5_features()))
    return art, _s5_features()[:2]


def _rwkv(fx: Fixtures, d: Path):
    import torch

    from edgesmith.compress import Artifact
    from edgesmith.models.rwkv.base import RWKVConfig
    from edgesmith.models.rwkv.checkpoint import build_model

    torch.manual_seed(0)
    model = build_model(RWKVConfig(version=7, n_layer=1, n_embd=64, head_size=16)).eval()
    return Artifact("torch", module=model), np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]])


def _run(fx: Fixtures, d: Path, source: str, cfg: dict):
    from edgesmith.compress import PassContext, config_from_dict, run_passes

    art, x = fx.artifact(source)
    out, _ = run_passes(art, [config_from_dict(cfg)], PassContext(workdir=d, calibration=fx.digits.calibration_data(64)))
    return out, x


def _onnx_with_module(fx: Fixtures, d: Path):
    """An ONNX export that still carries the torch module it came from (what a torch factory deploy holds)."""
    from edgesmith.compress import Artifact

    onnx_art = fx.foreign["onnx"]
    return Artifact("onnx", path=onnx_art.path, module=fx.digits.module, meta=dict(onnx_art.meta)), \
        fx.digits.example_inputs(3)


FIXTURES = {
    "mlp-torch": lambda fx, d: (fx.foreign["torch"], fx.digits.example_inputs(3)),
    "mlp-onnx": lambda fx, d: (fx.foreign["onnx"], fx.digits.example_inputs(3)),
    "mlp-onnx-with-module": _onnx_with_module,
    "sigma-delta": lambda fx, d: _run(fx, d, "mlp-torch", {"kind": "export-netx"}),
    "s5-torch": _s5,
    "lrnn-fixed": _lrnn_fixed,
    "rwkv-torch": _rwkv,
    "rwkv-c": lambda fx, d: _run(fx, d, "rwkv-torch", {"kind": "export-rwkv-c", "weights": "int4"}),
    "trees": lambda fx, d: fx.trees,
    "nir-graph": _nir_graph,
    "tree-c": lambda fx, d: (_run(fx, d, "trees", {"kind": "export-tree-c"})[0], fx.trees[1]),
}


def _s5_context(fx: Fixtures) -> dict:
    from edgesmith.models.lrnn.data import Split

    rng = np.random.default_rng(0)
    clean = rng.normal(0, 0.1, (4, 3200)).astype(np.float32)
    noisy = (clean + rng.normal(0, 0.05, clean.shape)).astype(np.float32)
    return {"calibration": _s5_features(), "train_data": Split(noisy=noisy, clean=clean, snr_db=np.zeros(4),
                                                               noise=np.array(["white"] * 4))}


def _rwkv_context(fx: Fixtures) -> dict:
    return {"calibration": np.random.default_rng(0).integers(0, 256, (4, 32)).astype(np.int64),
            "example_input": np.array([[1, 2, 3]])}


CONTEXTS = {"s5-torch": _s5_context, "rwkv-torch": _rwkv_context}


# --- the checks ------------------------------------------------------------------------------------------------


def check_kind(name: str) -> None:
    from edgesmith.common import EdgesmithError
    from edgesmith.compress.base import Artifact, pass_kinds
    from edgesmith.models.kinds import get_kind

    kind = get_kind(name)
    opts = kind.options({})
    _require(type(opts).from_dict(json.loads(opts.to_json())) == opts, name, "options must round-trip through JSON")
    _refuses(lambda: kind.options({"no_such_option": 1}), name, "an unknown option must be refused", "no option")
    json.dumps(kind.describe())
    _require(kind.unit and kind.default_batch_sizes and kind.default_n_calibration >= 1, name,
             "a kind needs a unit, default batch sizes and a calibration count")
    _require(kind.export_pass in pass_kinds(), name, f"export pass {kind.export_pass!r} is not registered")
    producer = producer_of(name)
    art = Artifact("onnx", path=Path("contract.onnx"), meta={"recurrent": None})  # never opened
    try:
        fast, slow = (kind.speed(p50, 2, producer, art) for p50 in (1e-3, 2e-3))
    except (EdgesmithError, AttributeError, KeyError, TypeError) as e:
        raise ContractError(f"{name}: speed() fails for a producer of the kind: {type(e).__name__}: {e}") from e
    for s in (fast, slow):
        _require(isinstance(s.value, (int, float)) and math.isfinite(s.value) and s.value > 0 and s.unit, name,
                 f"the speed figure must be finite and positive, with a unit (got {s})")
    worse = slow.value < fast.value if fast.higher_is_better else slow.value > fast.value
    _require(worse, name, f"a call that takes twice as long must give a worse speed figure ({fast} vs {slow})")


def check_pass(kind: str, workdir: str | Path, fixtures: Fixtures | None = None) -> None:
    from edgesmith.common import EdgesmithError
    from edgesmith.compress import apply_pass, config_from_dict, config_from_json
    from edgesmith.compress.base import pass_config_type

    fx = fixtures or Fixtures(workdir)
    cls = pass_config_type(kind)
    cfg = cls()
    _require(config_from_dict(cfg.to_dict()) == cfg, kind, "the default config must round-trip through to_dict")
    _require(config_from_json(cfg.to_json()).to_json() == cfg.to_json(), kind, "the config must round-trip through JSON")
    _require(cfg.to_dict()["kind"] == kind, kind, "to_dict must name the pass")
    name = getattr(cls, "contract_fixture", "")
    art = fx.artifact(name)[0] if name else fx.foreign.get(cfg.input_format)
    _require(art is not None, kind, f"there is no model of format {cfg.input_format!r} to check it on: set "
                                    "contract_fixture on its config class")
    _require(art.format == cfg.input_format, kind, f"its contract fixture {name!r} is {art.format}, not "
                                                   f"{cfg.input_format}")
    ctx = fx.pass_context(name, kind)
    wrong = next(a for f, a in fx.foreign.items() if f != cfg.input_format)
    _refuses(lambda: apply_pass(wrong, cfg, ctx), kind, f"a {wrong.format} artifact must be refused", kind)
    try:
        res = apply_pass(art, cfg, ctx)
    except EdgesmithError as e:  # a pass that refuses every input passes nothing
        raise ContractError(f"{kind}: it must transform its contract fixture ({name or 'the ' + cfg.input_format + ' model'}), "
                            f"but refused it: {e}") from e
    _require(res.artifact.format == cfg.output_format, kind, f"it wrote {res.artifact.format}, not {cfg.output_format}")
    _require(res.report.size_after_bytes > 0, kind, "its report must give the size after")


def check_runtime(name: str, workdir: str | Path, fixtures: Fixtures | None = None) -> None:
    from edgesmith.runtimes import get_runtime
    from edgesmith.runtimes.base import RUNTIMES

    fx = fixtures or Fixtures(workdir)
    cls = RUNTIMES.get(name)
    ok, why = cls.available()
    if not ok and cls.extra:  # a peer's backend without its extra: the contract is a refusal that names the extra
        _refuses(lambda: get_runtime(name), name, "its missing package must be refused", name)
        _require(cls.extra in why, name, f"the refusal must name the extra {cls.extra!r} that brings it: {why!r}")
        return
    get_runtime(name)  # imports the backend (and says why, if it is not available here)
    _require(cls.contract_fixture in FIXTURES, name, f"names no known contract fixture ({cls.contract_fixture!r})")
    art, x = fx.artifact(cls.contract_fixture)
    _require(art.format in cls.formats, name, f"its fixture is {art.format}, which it does not load")
    res = get_runtime(name, threads=1).load(art).run(x)
    _require(isinstance(res.outputs, np.ndarray) and res.outputs.shape[0] == len(x), name,
             "outputs must be one batch-first array")
    _require(res.outputs.dtype == np.float32 and np.all(np.isfinite(res.outputs)), name,
             "outputs must be finite float32")
    _require(res.stats.get("runtime") == name and res.stats.get("wall_s", 0) > 0, name,
             "stats must name the runtime and its wall time")
    other = next(a for f, a in fx.foreign.items() if f not in cls.formats)
    _refuses(lambda: get_runtime(name).load(other), name, f"a {other.format} artifact must be refused", name)


def producer_of(kind: str):
    """A registered producer of ``kind`` (not built)."""
    from edgesmith.models import get_producer, producer_names

    found = next((p for p in (get_producer(n) for n in producer_names()) if p.kind == kind), None)
    _require(found is not None, kind, "no registered producer makes models of this kind")
    return found


def check_target(name: str) -> None:
    from edgesmith.compress.base import pass_config_type, pass_kinds
    from edgesmith.hardware import PlanOptions, get_target
    from edgesmith.models.kinds import kind_names
    from edgesmith.runtimes import get_runtime, runtime_names
    from edgesmith.runtimes.base import RUNTIMES

    t = get_target(name)
    _require(set(t.kinds) <= set(kind_names()) and set(t.refused_kinds) <= set(kind_names()), name,
             "names kinds that are not registered")
    for kind in kind_names():
        producer = producer_of(kind)
        if kind not in t.kinds:
            _refuses(lambda: t.plan(producer, PlanOptions()), name, f"kind {kind} must be refused", kind)
            continue
        plan = t.plan(producer, PlanOptions())
        _require(plan.variants, name, f"plans no variant for {kind}")
        for v in plan.variants:
            fmt = producer.native_format
            for cfg in v.passes:
                _require(cfg.kind in pass_kinds() and isinstance(cfg, pass_config_type(cfg.kind)), name,
                         f"variant {v.name} names pass {cfg.kind!r}, which is not registered")
                _require(cfg.input_format == fmt, name, f"variant {v.name}: pass {cfg.kind} takes {cfg.input_format}, "
                                                        f"but gets {fmt}")
                fmt = cfg.output_format
            _require(v.runtimes and all(r in runtime_names() for r in v.runtimes), name,
                     f"variant {v.name} names runtimes that are not registered: {v.runtimes}")
            for r in v.runtimes:
                get_runtime(r)
                _require(fmt in RUNTIMES.get(r).formats, name, f"variant {v.name}: runtime {r} does not load {fmt}")
        json.dumps(plan.to_dict())


def check_producer(name: str) -> None:
    import torch

    from edgesmith.bench.pipeline.deploy import predictor, source_artifact
    from edgesmith.models import get_producer
    from edgesmith.models.kinds import get_kind
    from edgesmith.compress.formats import FORMATS, reference_runtime
    from edgesmith.runtimes import get_runtime

    cls = type(get_producer(name))
    producer = get_producer(name, seed=0, **cls.tiny_options)
    # a sweep asks for the weight files to key its cells before anything is built: asking must not build
    _require(all(isinstance(p, Path) for p in producer.weight_files()) and not hasattr(producer, "module_"), name,
             "weight_files() must list paths without building the model")
    kind = get_kind(producer.kind)
    kind.check_producer(producer)
    _require(producer.native_format in FORMATS, name, f"native format {producer.native_format!r} is not registered")
    producer.build()
    calib = producer.calibration_data(4)
    _require(1 <= len(calib) <= 4 and np.all(np.isfinite(calib)), name, "calibration data must be 1-4 finite samples")
    if not kind.variable_length:
        _require(tuple(calib.shape[1:]) == tuple(producer.input_shape), name,
                 f"calibration samples are {tuple(calib.shape[1:])}, not the declared {tuple(producer.input_shape)}")
    _require(len(producer.example_inputs(3)) == 3, name, "example_inputs(3) must give three samples")
    art = source_artifact(producer)
    rt = get_runtime(reference_runtime(art.format), threads=1).load(art)
    with torch.inference_mode():
        ev = producer.evaluate(predictor(rt, art))
    _require(np.isfinite(ev.value) and ev.n_samples > 0, name, "the reference must score a finite metric")
    json.dumps(ev.to_dict())
    _require(dataclasses.is_dataclass(kind.options({})), name, "kind options must be a dataclass")
