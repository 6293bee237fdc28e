"""The installed package, not the checkout: a wheel built from this tree, installed in a fresh environment with no
source tree on its path, run from another folder on a fresh cache. It must carry what the code reads beside itself
(shipped weights, recipes, C sources, tuning records), so that nothing retrains and the demo recipe is found."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(run, folder): ``run(*args)`` runs ``python -m edgesmith.bench.cli ARGS`` with the installed wheel."""
    tmp = tmp_path_factory.mktemp("install")
    wheels = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, cwd=tmp, capture_output=True, timeout=600)
    (wheel,) = wheels.glob("edgesmith-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, timeout=600)
    # the dependencies come from this environment's site-packages as a plain path: its .pth files (the editable
    # install of the checkout among them) are not processed, so `edgesmith` can only be the wheel's
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EDGESMITH_LAVA_PYTHON")}
    env["EDGESMITH_CACHE"] = str(tmp / "cache")

    def run(*args, timeout=600):
        return subprocess.run([str(py), "-m", "edgesmith.bench.cli", *map(str, args)], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)

    where = subprocess.run([str(py), "-c", "import edgesmith, edgesmith.bench.demo as d; print(edgesmith.__file__); "
                            "print(d.DEMO_RECIPE.is_file())"], cwd=work, env=env, capture_output=True, text=True)
    return run, work, where.stdout.split()


def test_the_wheel_is_what_runs_and_carries_its_recipes(installed):
    _, _, (init, demo_found) = installed
    assert "site-packages" in init and not init.startswith(str(ROOT)), init
    assert demo_found == "True"


def test_the_installed_cli_lists_models_and_its_version(installed):
    run, _, _ = installed
    models = run("models")
    assert models.returncode == 0 and "rwkv7-ref" in models.stdout and "gbrl-cartpole" in models.stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("edgesmith 0.")


@pytest.mark.parametrize("model, variant", [("digits-mlp", "fp32"), ("rwkv7-ref", "fp32"), ("gbrl-cartpole", "trees")])
def test_installed_deploys_load_shipped_weights_without_training(installed, model, variant):
    run, work, _ = installed
    # minutes of training (two hours for RWKV) would pass the time limit: the shipped weights must load
    p = run("deploy", model, "--target", "host-cpu", "--variant", variant, "--no-tvm", "--reps", "5", "--warmup", "1",
            "--batch", "1", "--out", work / model, "--quiet", timeout=300)
    assert p.returncode == 0, p.stderr[-800:]
    assert (work / model / "report.md").exists()


def test_the_installed_demo_runs_a_recipe(installed):
    run, work, _ = installed
    (work / "short.toml").write_text('[[deploy]]\nmodel = "digits-mlp"\ntarget = "jetson-orin-nano"\n')
    p = run("demo", "--recipe", "short.toml", "--out", work / "demo", "--quiet", timeout=300)
    assert p.returncode == 0, p.stderr[-800:]
    assert (work / "demo" / "summary.md").exists()


def test_a_pip_user_is_told_to_run_setup_lava(installed):
    run, work, _ = installed
    p = run("deploy", "digits-mlp", "--target", "loihi2", "--out", work / "l", "--quiet")
    assert p.returncode == 2 and "edgesmith setup lava" in p.stderr and "make setup` in a source checkout" in p.stderr
