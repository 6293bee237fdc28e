"""``edgesmith setup lava``: build the Python 3.10 environment that runs Lava (lava-nc 0.10, lava-dl 0.6) out of
process, for an installed copy as for a checkout (``make setup`` calls it for ``.venv-lava``).

The environment is built in place (a venv cannot be moved once made) and marked ready only when every requirement
installed; a failed build is removed, so a second run starts clean, and a finished one is not rebuilt.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from edgesmith.common import LAVA_REQUIREMENTS, LAVA_STAMP, EdgesmithError, default_lava_env


def find_python310(given: str | None = None) -> str:
    """A Python 3.10 interpreter: ``given``, else python3.10 on PATH, else pyenv's newest 3.10."""
    candidates = [given] if given else [shutil.which("python3.10"),
                                        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10.*/bin/python3.10")),
                                                reverse=True)]
    for py in filter(None, candidates):
        try:
            out = subprocess.run([py, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.stdout.strip() == "True":
            return py
        if given:
            raise EdgesmithError(f"{given} is not Python 3.10.", "give a Python 3.10 interpreter with --python.")
    raise EdgesmithError("Python 3.10 was not found (lava-nc 0.10 runs on 3.10 only).",
                         "install it (pyenv install 3.10, or your distribution's python3.10) or pass --python PATH.")


def setup_lava(into: str | os.PathLike | None = None, python: str | None = None, quiet: bool = False) -> Path:
    """Build (or find ready) the Lava environment in ``into`` (default: where edgesmith looks, ``default_lava_env``);
    returns its Python."""
    env = Path(into) if into else default_lava_env()
    py = env / "bin" / "python"
    if (env / LAVA_STAMP).exists() and py.exists():
        return py
    if env.exists() and not (env / "pyvenv.cfg").exists():
        raise EdgesmithError(f"{env} exists and is not a Python environment.", "choose another folder with --into.")
    base = find_python310(python)
    out = subprocess.DEVNULL if quiet else None
    try:
        if not py.exists():
            subprocess.run([base, "-m", "venv", str(env)], check=True, stdout=out)
        subprocess.run([str(py), "-m", "pip", "install", *(["-q"] if quiet else []), *LAVA_REQUIREMENTS], check=True,
                       stdout=out)
        subprocess.run([str(py), "-c", "import lava.magma.core, lava.lib.dl.netx, numpy; "
                        "assert int(numpy.__version__.split('.')[0]) < 2"], check=True, stdout=out)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(env, ignore_errors=True)  # a half-built environment would pass for a ready one next time
        raise EdgesmithError(f"building the Lava environment in {env} failed at `{' '.join(map(str, e.cmd[:4]))} ...` "
                             f"(exit {e.returncode}); it was removed.",
                             "check the network to the package registry and the free disk (about 5.6 GB), then run "
                             "it again.") from None
    except KeyboardInterrupt:
        shutil.rmtree(env, ignore_errors=True)
        raise
    (env / LAVA_STAMP).write_text(" ".join(LAVA_REQUIREMENTS) + "\n")
    return py


