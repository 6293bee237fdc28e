"""A plugin author's view: a new target, pass, runtime, kind, producer and model source, each in its own
module with one registration line, deployed through the same pipeline and CLI as the built-in ones.

The modules are written to a temporary folder (as a user's own package would be) and named in the registry
tables; nothing else in edgesmith is touched, which is the point: if a deploy needed an edit anywhere else,
this test could not pass.
"""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

KIND = '''
from edgesmith.models.kinds.base import Kind, register_kind


@register_kind
class Toy(Kind):
    name = "toy"
    description = "a toy vector model (the plugin test)"
    unit = "vector"
    default_batch_sizes = (1, 4)
'''

PRODUCER = '''
import numpy as np
import torch

from edgesmith.models.base import Evaluation, Metric, Producer, register_producer


@register_producer
class ToyModel(Producer):
    name = "toy-model"
    description = "y = 2x + 1 on 3 numbers"
    metric = Metric("mean_abs_error", higher_is_better=False)
    kind = "toy"

    def build(self):
        torch.manual_seed(self.seed)
        lin = torch.nn.Linear(3, 3)
        with torch.no_grad():
            lin.weight.copy_(2 * torch.eye(3) + 0.01 * torch.randn(3, 3))
            lin.bias.fill_(1.0)
        self.module_ = lin.eval()
        return self

    @property
    def input_shape(self):
        return (3,)

    def calibration_data(self, n=128):
        return np.random.default_rng(self.seed).normal(size=(n, 3)).astype(np.float32)

    def evaluate(self, predict):
        x = np.random.default_rng(self.seed + 1).normal(size=(32, 3)).astype(np.float32)
        return Evaluation(self.metric, float(np.mean(np.abs(predict(x) - (2 * x + 1)))), len(x))
'''

SOURCE = '''
from edgesmith.bench.sources.base import ModelSource, register_source


@register_source
class ToySource(ModelSource):
    name = "toy-source"
    description = "toy:SEED names the toy model built with that seed"

    def matches(self, spec):
        return spec.startswith("toy:")

    def load(self, spec, request):
        from toy_producer import ToyModel

        return ToyModel(seed=int(spec.removeprefix("toy:")))
'''

PASS = '''
from dataclasses import dataclass

import torch

from edgesmith.compress.base import Artifact, PassConfig, PassReport, PassResult, register_pass


@dataclass
class RoundWeightsConfig(PassConfig):
    kind = "round-weights"
    input_format = "torch"
    output_format = "torch"
    step: float = 0.25

    def validate(self):
        if not self.step > 0:
            self._fail("step", f"is {self.step!r}", "use a positive step.")


@register_pass(RoundWeightsConfig)
def round_weights(artifact, config, ctx):
    import copy

    module = copy.deepcopy(artifact.module)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.round(p / config.step) * config.step)
    size = artifact.size_bytes()
    report = PassReport(config.to_dict(), "torch", "torch", size, size, bits_per_weight=32.0)
    return PassResult(Artifact("torch", module=module, meta=dict(artifact.meta)), report)
'''

RUNTIME = '''
import numpy as np
import torch

from edgesmith.runtimes.base import Runtime, register_runtime


@register_runtime
class ToyRuntime(Runtime):
    name = "toy-rt"
    formats = ("torch",)
    description = "torch in float64 (the plugin test)"

    def _load(self, artifact):
        self.module_ = artifact.module.double()

    def _run(self, x):
        with torch.no_grad():
            return self.module_(torch.from_numpy(np.asarray(x, np.float64))).float().numpy(), {}
'''

TARGET = '''
from edgesmith.hardware.base import Coefficient, CostModel, Estimate, Plan, Target, Variant, register_target


class ToyCost(CostModel):
    name = "toy-cost"

    @property
    def coefficients(self):
        return {"s_per_mac": Coefficient("s_per_mac", 1e-9, "s", "made up for the plugin test")}

    def estimate(self, work):
        t = work.macs * work.batch * self.c("s_per_mac")
        return Estimate(energy_j=t, latency_s=max(t, 1e-9), breakdown={}, coefficients=self.used("s_per_mac"),
                        model=self.name)


@register_target
class ToyBoard(Target):
    name = "toy-board"
    description = "a board made up for the plugin test"
    numeric_formats = ("fp32",)
    memory_budget_bytes = 1 << 20
    memory_budget_source = "made up"
    runtime = "toy-rt"
    export_format = "torch"
    latency_provenance = "estimated"
    source_formats = ("torch",)

    @property
    def cost_model(self):
        return ToyCost()

    def plan_toy(self, producer, options, kopts):
        from toy_pass import RoundWeightsConfig

        return Plan(self.name, [Variant("fp32", [], ["toy-rt"], "as trained"),
                                Variant("rounded", [RoundWeightsConfig(step=0.25)], ["toy-rt"], "weights on a 0.25 grid")],
                    self.latency_provenance)

    planners = {"toy": plan_toy}
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Six modules in a user's folder, each named in its registry's table: the one registration line."""
    import edgesmith.bench.sources as sources
    import edgesmith.compress as compress
    import edgesmith.hardware as hardware
    import edgesmith.models as models
    import edgesmith.models.kinds as kinds
    import edgesmith.runtimes as runtimes
    from edgesmith.bench.sources.base import SOURCES
    from edgesmith.compress.base import PASSES
    from edgesmith.hardware.base import TARGETS
    from edgesmith.models.base import PRODUCERS
    from edgesmith.models.kinds.base import KINDS
    from edgesmith.runtimes.base import RUNTIMES

    folder = tmp_path / "my_plugins"
    folder.mkdir()
    for name, text in [("toy_kind", KIND), ("toy_producer", PRODUCER), ("toy_source", SOURCE), ("toy_pass", PASS),
                       ("toy_runtime", RUNTIME), ("toy_target", TARGET)]:
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(kinds, "KIND_MODULES", kinds.KIND_MODULES + ("toy_kind",))
    monkeypatch.setattr(models, "PRODUCER_MODULES", models.PRODUCER_MODULES + ("toy_producer",))
    monkeypatch.setattr(sources, "SOURCE_MODULES", ("toy_source",) + sources.SOURCE_MODULES)
    monkeypatch.setattr(compress, "PASS_MODULES", compress.PASS_MODULES + ("toy_pass",))
    monkeypatch.setattr(runtimes, "RUNTIME_MODULES", {**runtimes.RUNTIME_MODULES, "toy-rt": "toy_runtime"})
    monkeypatch.setattr(hardware, "TARGET_MODULES", hardware.TARGET_MODULES + ("toy_target",))
    yield
    for name in ("toy_kind", "toy_producer", "toy_source", "toy_pass", "toy_runtime", "toy_target"):
        sys.modules.pop(name, None)
    for registry, name in [(SOURCES, "toy-source"), (PASSES, "round-weights"), (TARGETS, "toy-board"),
                           (PRODUCERS, "toy-model"), (KINDS, "toy"), (RUNTIMES, "toy-rt")]:
        registry._entries.pop(name, None)  # gone with the test, as if the plugin had never been installed


def test_plugins_are_listed_beside_the_built_in_entries(plugins):
    import edgesmith
    from edgesmith.runtimes import runtime_names

    def names(rows):
        return {r["name"] if "name" in r else r.get("kind") for r in rows}

    assert "toy-board" in names(edgesmith.targets()) and "toy-model" in names(edgesmith.producers())
    assert "toy" in names(edgesmith.kinds()) and "round-weights" in names(edgesmith.passes())
    assert "toy-rt" in runtime_names()


def test_a_deploy_runs_through_a_plugin_target_pass_runtime_kind_and_producer(plugins, tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy

    out = deploy(DeployOptions("toy-model", "toy-board", tmp_path / "r", force=True))
    report = json.loads((out / "report.json").read_text())
    rows = {r["variant"]: r for r in report["results"]}
    assert set(rows) == {"fp32", "rounded"} and {r["runtime"] for r in rows.values()} == {"toy-rt"}
    assert report["kind"]["name"] == "toy" and report["unit"] == "vector"
    # the pass really changed the weights: 2 + 0.01 noise rounds to 2 on the 0.25 grid, so the rounded model is
    # closer to y = 2x + 1 than the noisy one it came from
    assert rows["rounded"]["evaluation"]["value"] < rows["fp32"]["evaluation"]["value"]
    assert rows["rounded"]["latency"]["4"]["provenance"] == "estimated"
    assert rows["rounded"]["speed"]["4"]["unit"] == "vectors/s"


def test_the_cli_deploys_a_model_a_plugin_source_recognises(plugins, tmp_path, capsys):
    from edgesmith.bench.cli import main

    assert main(["deploy", "toy:3", "--target", "toy-board", "--out", str(tmp_path / "c"), "--quiet"]) == 0
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert report["model"] == "toy:3" and len(report["results"]) == 2


def test_a_plugin_target_refuses_a_kind_it_has_no_planner_for(plugins, tmp_path):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.common import EdgesmithError

    with pytest.raises(EdgesmithError, match="toy-board cannot run digits-mlp, a tensor model"):
        deploy(DeployOptions("digits-mlp", "toy-board", tmp_path / "x"))
