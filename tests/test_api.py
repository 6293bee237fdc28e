"""The Python API (``import edgesmith``) and the one namespace it lives in."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import edgesmith


def test_import_edgesmith_is_cheap_and_subpackages_keep_their_names():
    code = ("import sys, edgesmith, edgesmith.common; from edgesmith import models, runtimes; "
            "print(json.dumps(['torch' in sys.modules, models.__name__, runtimes.__name__]))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, timeout=120,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [False, "edgesmith.models", "edgesmith.runtimes"]


def test_no_source_file_imports_a_top_level_package_outside_the_namespace():
    # `import models` would load a second copy of the registries (and clash with a user's own models/)
    from pathlib import Path

    root = Path(edgesmith.__file__).resolve().parent
    bad = []
    for f in root.rglob("*.py"):
        if any(part.startswith(".venv") for part in f.parts):
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            s = line.strip()
            if s.startswith(("from ", "import ")) and s.split()[1].split(".")[0] in (
                    "models", "bench", "hardware", "compress", "runtimes"):
                bad.append(f"{f.relative_to(root)}:{n}")
    assert not bad, bad


def test_api_lists_what_the_cli_lists():
    assert {p["name"] for p in edgesmith.producers()} >= {"digits-mlp", "rwkv7-ref", "lrnn-denoiser", "gbrl-cartpole"}
    assert {k["name"] for k in edgesmith.kinds()} == {"tensor", "token-lm", "stream", "tree-policy"}
    assert {t["name"] for t in edgesmith.targets()} == {"host-cpu", "jetson-orin-nano", "loihi2"}
    assert "export-step-onnx" in {p["kind"] for p in edgesmith.passes()}


def test_api_deploy_and_quantize_mirror_the_cli(tmp_path):
    out = edgesmith.deploy("digits-mlp", target="jetson-orin-nano", out=tmp_path / "r", variants=["fp32"], reps=5)
    report = json.loads((out / "report.json").read_text())
    assert report["kind"]["name"] == "tensor" and [r["variant"] for r in report["results"]] == ["fp32"]
    res = edgesmith.quantize("digits-mlp", "int8-qdq", out=tmp_path / "q.onnx", options={"calibration": "percentile"})
    assert res.path.exists() and res.report_path.exists() and res.evaluation.value > 0.9
    with pytest.raises(edgesmith.EdgesmithError, match="already exists"):
        edgesmith.quantize("digits-mlp", "int8-qdq", out=tmp_path / "q.onnx")


def test_api_user_errors_carry_a_fix():
    with pytest.raises(edgesmith.EdgesmithError) as e:
        edgesmith.deploy("digits-mlp", target="tpu")
    assert e.value.fix and "host-cpu" in e.value.fix
    with pytest.raises(edgesmith.EdgesmithError, match=r"calibration data has shape \(0, 64\): no samples"):
        edgesmith.quantize("digits-mlp", "int8-qdq", out="/tmp/never.onnx", calibration=np.zeros((0, 64)))


@pytest.mark.parametrize("call,name", [
    (lambda t: edgesmith.deploy("digits-mlp", target="host-cpu", out=t / "r", options="prune_sparsity=0.5"), "options"),
    (lambda t: edgesmith.quantize("digits-mlp", "int8-qdq", out=t / "q.onnx", model_options=["seed=1"]), "model_options"),
    (lambda t: edgesmith.export("digits-mlp", t / "e.onnx", options=("batch", 1)), "options"),
])
def test_api_options_that_are_not_a_dict_are_one_error_naming_the_argument(tmp_path, call, name):
    # a CLI habit (KEY=VALUE text) gave "dictionary update sequence element #0 has length 1" from deep inside
    with pytest.raises(edgesmith.EdgesmithError, match=rf"^{name} is a \w+ .*, not a dict"):
        call(tmp_path)
    assert not list(tmp_path.iterdir())


def test_data_flows_one_way_models_compress_hardware_runtimes_bench():
    # a package may import only the ones upstream of it (and edgesmith.common): no import turns the flow back
    import re
    from pathlib import Path

    order = ["models", "compress", "hardware", "runtimes", "bench"]
    root = Path(edgesmith.__file__).resolve().parent
    back = []
    for i, pkg in enumerate(order):
        later = "|".join(order[i + 1:])
        if not later:
            continue
        pattern = re.compile(rf"^\s*(from|import) edgesmith\.({later})\b", re.M)
        for f in (root / pkg).rglob("*.py"):
            for m in pattern.finditer(f.read_text()):
                back.append(f"{f.relative_to(root)} imports edgesmith.{m.group(2)}")
    assert not back, back
