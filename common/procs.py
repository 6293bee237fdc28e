"""Child processes that die with their parent and never outlive a timeout."""
from __future__ import annotations

import os



def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL this process when its parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:  # not Linux: the process group kill below still covers normal exits
        pass


def run_child(cmd: list[str], *, timeout_s: float | None = None, env: dict | None = None, cwd=None):
    """``subprocess.run(cmd, capture_output=True, text=True)`` whose child cannot outlive us: it runs in its
    own process group, gets SIGKILL when this process dies (even by SIGKILL), and its whole group is killed
    when we stop waiting for it (timeout, Ctrl-C, any exception). Raises ``subprocess.TimeoutExpired``."""
    import signal
    import subprocess

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True, preexec_fn=die_with_parent)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
