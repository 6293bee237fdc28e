"""Running the CLI in-process and checking the user-error contract, shared by the CLI test files."""
from __future__ import annotations

from edgesmith.bench.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, err, *needles):
    assert code == 2
    assert err.startswith("edgesmith: error: ")
    assert "Traceback" not in err
    assert "fix:" in err  # every user error says how to fix it
    for n in needles:
        assert n in err
