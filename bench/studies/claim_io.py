"""Output of the claim-reproduction commands: refuse an existing folder before any work, then write
``table.json``, ``table.md`` and the plots into a temporary folder that is renamed into place."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from edgesmith.common import atomic_path, check_output, write_json


def claim_command(module: str, argv: list[str] | None) -> str:
    """The command that reproduces a run, as recorded in its table: ``python -m MODULE`` and the arguments (``argv``,
    or the process's own when None), each quoted as a shell needs it (``--option 'int8_op_types=[]'``)."""
    import shlex
    import sys

    return f"python -m {module} {shlex.join(sys.argv[1:] if argv is None else argv)}".rstrip()


def peer_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """{package: installed version} of the benchmark peers a study runs; one line naming the extra when one is missing."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {p: version(p) for p in packages}
    except PackageNotFoundError as e:
        raise SystemExit(f"error: this study needs {e.name} (pip install 'edgesmith[peer]').") from None


def save_png(fig, path: Path, dpi: int = 110) -> None:
    """Write a matplotlib figure as a PNG, atomically, and close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)


def refuse_existing(out: Path, force: bool) -> None:
    """Fail before an expensive run when ``out`` exists and ``--force`` was not given."""
    check_output(out, force=force, folder=True)


def write_claim(out: Path, force: bool, result: dict, markdown: Callable[[dict], str],
                draw: Callable[[Path], list | None]) -> str:
    """Draw the plots into the new folder (``draw(folder)``; a returned list of file names is recorded
    as ``result["plots"]``), then write the JSON and the Markdown table; returns the Markdown."""
    with atomic_path(Path(out), force=force) as tmp:
        tmp.mkdir(parents=True)
        plots = draw(tmp)
        if plots is not None:
            result["plots"] = plots
        md = markdown(result)
        write_json(tmp / "table.json", result)
        (tmp / "table.md").write_text(md)
    return md


def claim_main(argv, doc: str, default_out: str, run: Callable[[bool, Path], dict], markdown: Callable[[dict], str],
               draw: Callable[[dict], Callable[[Path], list | None]]) -> int:
    """``--out``/``--force``/``--quick`` entry point of a claim script: refuse an existing folder, run in a
    temporary work folder, write the claim, print the Markdown; a user error prints one line and returns 2."""
    import argparse
    import tempfile

    from edgesmith.common import EdgesmithError

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(default_out))
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    try:
        refuse_existing(args.out, args.force)
        with tempfile.TemporaryDirectory(prefix="edgesmith-claim-") as tmp:
            res = run(args.quick, Path(tmp))
        print(write_claim(args.out, args.force, res, markdown, draw(res)))
    except EdgesmithError as e:
        return user_error(e)
    return 0


def user_error(e) -> int:
    """A benchmark script's user error, printed as the CLI prints it (problem, then fix); returns exit status 2."""
    import sys

    print(f"edgesmith: error: {e.problem}" + (f"\n  fix: {e.fix}" if e.fix else ""), file=sys.stderr)
    return 2

