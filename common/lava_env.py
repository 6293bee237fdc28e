"""The Lava environment (Python 3.10: lava-nc 0.10, lava-dl 0.6), found, checked and run out of process."""
from __future__ import annotations

import os
from pathlib import Path


from edgesmith.common.cache import SOURCE_ROOT, cache_dir
from edgesmith.common.errors import EdgesmithError
from edgesmith.common.procs import run_child


LAVA_ENV_VAR = "EDGESMITH_LAVA_PYTHON"
# what `edgesmith setup lava` (and `make setup`) installs: lava-dl pins torch >=2.3.1,<2.4, and opencv-python-headless
# 4.12+ wants numpy 2, which lava-nc cannot import
LAVA_REQUIREMENTS = ("lava-nc==0.10.0", "lava-dl==0.6.0", "torch>=2.3.1,<2.4", "numpy<2", "opencv-python-headless<4.12",
                     "networkx<=2.8.7", "scipy", "h5py")
LAVA_STAMP = ".edgesmith-lava-ready"  # written into a Lava env once every requirement installed


def default_lava_env() -> Path:
    """Where `edgesmith setup lava` builds the Lava env: .venv-lava in a source checkout, else beside the user cache."""
    if (SOURCE_ROOT / "pyproject.toml").exists():
        return SOURCE_ROOT / ".venv-lava"
    return cache_dir() / "venv-lava"


def lava_python() -> Path:
    """The Lava env's interpreter: $EDGESMITH_LAVA_PYTHON, else that of ``default_lava_env``."""
    override = os.environ.get(LAVA_ENV_VAR)
    return Path(override) if override else default_lava_env() / "bin" / "python"


def lava_available() -> tuple[bool, str]:
    """Whether the Lava env's interpreter is there and runnable, and if not, what to do."""
    py = lava_python()
    if not py.exists():
        return False, (f"the Lava Python 3.10 env was not found at {py}. Fix: run `edgesmith setup lava` to build it "
                       "(about 5.6 GB; `make setup` in a source checkout), or point "
                       f"{LAVA_ENV_VAR} at the Python of an env with lava-nc 0.10 and lava-dl 0.6.")
    if not py.is_file() or not os.access(py, os.X_OK):
        return False, (f"{py} is not an executable Python interpreter (a folder, or not executable). Fix: point "
                       f"{LAVA_ENV_VAR} at the python of an env with lava-nc 0.10 and lava-dl 0.6 "
                       "(e.g. .venv-lava/bin/python).")
    return True, ""


def run_in_lava_env(script: Path, args: list[str], *, timeout_s: float, cwd, what: str, too_long_fix: str,
                    failed_fix: str, expect: Path | None = None) -> float:
    """Run a standalone script with the Lava env's Python; return its wall time in seconds.

    Every failure is one ``EdgesmithError``: no Lava env, a run past ``timeout_s``, or a script that exits
    non-zero or does not write ``expect`` (its last stderr line is quoted)."""
    import subprocess
    import time

    ok, why = lava_available()
    if not ok:
        problem, _, fix = why.partition(" Fix: ")
        raise EdgesmithError(problem, fix or None)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    t0 = time.perf_counter()
    try:
        proc = run_child([str(lava_python()), str(script), *args], timeout_s=timeout_s, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise EdgesmithError(f"{what} ran past {timeout_s:.0f} s.", too_long_fix) from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or (expect is not None and not Path(expect).exists()):
        lines = [ln.strip() for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        last = lines[-1][:400] if lines else "(no error output)"
        raise EdgesmithError(f"{Path(script).name} failed: {last}", failed_fix)
    return wall
