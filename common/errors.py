"""The user-error type every package raises: one line naming the problem and one naming the fix."""
from __future__ import annotations



class EdgesmithError(Exception):
    """A problem the user can fix. The CLI prints it as one line (problem + fix) and exits non-zero.

    ``fix`` says what to do about it; keep both parts short and concrete.
    """

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem} Fix: {fix}")


class Interrupted(EdgesmithError):
    """Ctrl-C, where work that finished is kept: the message says what was kept (exit status 130, as for SIGINT)."""

    exit_code = 130


class NoEvaluationData(EdgesmithError):
    """A user's model was given no data to score on: ``quantize`` still writes its file and says why it is unscored."""


def raised(e: BaseException, limit: int = 200) -> str:
    """What the user's code raised, as ``Type: first line`` (``SystemExit(3)`` for a ``sys.exit(3)``)."""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r})"
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:limit]}" if lines else type(e).__name__
