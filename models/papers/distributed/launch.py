"""Run a module's worker entry point under ``torchrun`` with N processes and collect rank 0's result.

    res = launch("edgesmith.models.papers.eflanding.worker", {"iters": 500}, nproc=4)
    res.result          # what rank 0's function returned
    res.communication   # processes, backend, bytes sent per worker and in total

The module must call ``models.papers.distributed.comm.run_worker(fn)`` under ``if __name__ == "__main__"``.
``torchrun --standalone`` picks a free local port, so several launches can run side by side.

A worker that raises a Python exception fails the launch at once, naming the exception. A worker that
dies without one (a signal, or a gloo connection dropped at start-up or teardown on a loaded machine)
gets the whole launch run once more, also when the only exceptions are its peers' gloo transport errors
(a peer still connecting when it died raises "Connection closed by peer" before torchrun stops it),
and ``LaunchResult.restarts`` says that it happened; a second such death is an error naming torchrun's
root cause (exit code, signal). Either way torchrun's full stderr is kept in a log file the message names.
"""
from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from edgesmith.common import EdgesmithError, scratch_dir
from edgesmith.models.papers.distributed.comm import BACKEND_ENV, TIMEOUT_ENV


@dataclass
class LaunchResult:
    result: dict
    communication: dict
    seconds: float
    backend: str
    processes: int
    restarts: int = 0  # worker-group restarts torchrun needed (0 on a clean run)

    def to_dict(self) -> dict:
        return {"processes": self.processes, "backend": self.backend, "seconds": self.seconds,
                "restarts": self.restarts, "communication": self.communication}


def torchrun_path() -> str:
    """The ``torchrun`` beside this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "torchrun"
    if beside.exists():
        return str(beside)
    found = shutil.which("torchrun")
    if found:
        return found
    raise EdgesmithError("torchrun was not found beside the Python interpreter or on PATH.",
                         "install torch in this environment (it ships torchrun).")


def choose_backend(nproc: int) -> str:
    """NCCL when every process can have its own GPU, else gloo (CPU)."""
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available() and dist.is_nccl_available() and torch.cuda.device_count() >= nproc:
        return "nccl"
    if not dist.is_gloo_available():
        raise EdgesmithError("this torch build has neither gloo nor a usable NCCL backend.",
                             "install a torch build with distributed support.")
    return "gloo"


def launch(module: str, config: dict, nproc: int, *, timeout_s: float = 300.0, backend: str | None = None,
           collective_timeout_s: float = 120.0) -> LaunchResult:
    """Start ``torchrun --nproc-per-node nproc --standalone -m module --config ... --result ...``."""
    if not isinstance(nproc, int) or nproc < 1:
        raise EdgesmithError(f"process count {nproc!r} is not a positive integer.", "pass nproc=1 or more.")
    backend = backend or choose_backend(nproc)
    if backend not in ("gloo", "nccl"):
        raise EdgesmithError(f"unknown backend {backend!r}.", "use gloo (CPU) or nccl (one GPU per process).")
    env = {**os.environ, BACKEND_ENV: backend, TIMEOUT_ENV: str(collective_timeout_s), "OMP_NUM_THREADS": "1"}
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with scratch_dir("dist") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [torchrun_path(), "--nproc-per-node", str(nproc), "--standalone", "-m", module,
               "--config", json.dumps(config), "--result", str(result_file)]
        t0 = time.perf_counter()
        for attempt in range(MAX_RESTARTS + 1):
            result_file.unlink(missing_ok=True)
            returncode, err = _run(cmd, env, root, timeout_s, module, nproc)
            if returncode == 0 and result_file.exists():
                break
            if _lost_without_exception(err) and attempt < MAX_RESTARTS:
                continue  # died without an exception of its own: once more, counted in restarts
            log = _keep_log(module, err)
            raise EdgesmithError(f"torchrun {module} with {nproc} processes ({backend}) failed with exit code "
                                 f"{returncode}: {_last_error(err)} (torchrun's full output: {log})",
                                 "read the worker error above; check the run's settings and that torch.distributed works here.")
        seconds = time.perf_counter() - t0
        data = json.loads(result_file.read_text())
    return LaunchResult(data["result"], data["communication"], seconds, backend, nproc, attempt)


MAX_RESTARTS = 1


def _run(cmd: list, env: dict, root: str, timeout_s: float, module: str, nproc: int) -> tuple[int, str]:
    # a session of its own, so a timeout can end exactly the processes this launch started
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=root)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise EdgesmithError(f"torchrun {module} with {nproc} processes did not finish within {timeout_s:g} s.",
                             "raise the timeout, lower the iteration count, or check for a hung collective.") from None
    return proc.returncode, err


def _keep_log(module: str, stderr: str) -> Path:
    """torchrun's stderr of a failed run, kept under the cache's logs/ folder."""
    from edgesmith.common import cache_dir

    folder = cache_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torchrun-{module.rsplit('.', 2)[-2]}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    path.write_text(stderr or "")
    return path


# what a surviving worker raises when its peer vanished: a consequence of the loss, not a cause
_PEER_LOST = re.compile(r"Connection (closed|reset) by peer|connectFullMesh failed|Broken pipe|"
                        r"(Socket|Connection) timed? ?out", re.I)


def _raised(stderr: str) -> list[str]:
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    raised = re.compile(r"^(\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(Error|Exception|Interrupt)(:|$)")
    # torchrun's own ChildFailedError only says that a worker failed; the worker's exception says why
    return [ln for ln in lines if raised.match(ln) and "ChildFailedError" not in ln]


def _python_error(stderr: str) -> str | None:
    """The exception a worker raised, from a failed run's stderr; None when no worker raised one.

    A worker's own exception is named before a peer's report that its connection dropped."""
    own = _raised(stderr)
    for pool in ([ln for ln in own if not _PEER_LOST.search(ln)], own):
        ranked = [ln for ln in pool if ln.startswith("[rank")]
        if ranked or pool:
            return (ranked or pool)[0 if ranked else -1][:400]
    return None


def _lost_without_exception(stderr: str) -> bool:
    """True when no worker raised an exception of its own (at most peers' dropped-connection errors)."""
    return all(_PEER_LOST.search(ln) for ln in _raised(stderr))


def _last_error(stderr: str) -> str:
    """The most telling line of a failed run's stderr (the raised exception, if any)."""
    found = _python_error(stderr)
    if found:
        return found
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    # no Python exception: a worker died from a signal or exited on its own; torchrun's root-cause block says how
    cause = [ln for ln in lines if re.match(r"^(exitcode|traceback|rank)\s*:", ln)]
    if cause:
        return "; ".join(cause[-3:])[:400]
    return lines[-1][:400] if lines else "no output"
