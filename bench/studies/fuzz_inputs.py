"""Fuzz every input format edgesmith reads (``edgesmith.bench.fuzz``) and write the counts per format.

    python -m edgesmith.bench.studies.fuzz_inputs --cases 300 --out docs/results/reliability/fuzz
    python -m edgesmith.bench.studies.fuzz_inputs --format netx --only 17     # reproduce one case

Each case is a mutated copy of a valid seed file run through the command that reads it, in this process, with a
time limit; a case is clean when it exits 0, or 2 with one error line, and leaves nothing behind. The cases that
were not clean stay in the work folder (``--work``) with their messages in ``fuzz.json``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from edgesmith.bench.studies.claim_io import claim_command, user_error
from edgesmith.bench.fuzz import FORMATS, fuzz, summary_table, to_json
from edgesmith.common import EdgesmithError, atomic_path, check_output


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300, help="mutated files per format")
    ap.add_argument("--format", action="append", choices=sorted(FORMATS), help="only these formats (repeatable)")
    ap.add_argument("--only", type=int, action="append", help="only these case numbers (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take before it counts as a hang")
    ap.add_argument("--work", type=Path, help="work folder (default: a new temporary one, kept if a case failed)")
    ap.add_argument("--out", type=Path, help="write fuzz.md and fuzz.json into this folder")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.out:
            check_output(args.out, force=args.force, folder=True)
        names = args.format or list(FORMATS)
        work = args.work or Path(tempfile.mkdtemp(prefix="edgesmith-fuzz-"))
        t0 = time.perf_counter()
        summaries = fuzz(names, args.cases, work, seed=args.seed, timeout_s=args.timeout, only=args.only,
                         progress=lambda line: print(f"\r{line[:150]:<150}", end="", file=sys.stderr, flush=True))
        print(file=sys.stderr)
        wall = time.perf_counter() - t0
        failed = sum(s.cases - s.counts["clean"] + (not s.seed_clean) for s in summaries)
        md = (f"# Fuzzing edgesmith's input formats\n\n`{claim_command('edgesmith.bench.studies.fuzz_inputs', argv)}`"
              f" ({wall:.0f} s wall; work folder {work})\n\n" + summary_table(summaries))
        for s in summaries:
            for f in s.failures:
                md += f"\n- {f['format']} case {f['index']} ({f['mutation']}): {f['outcome']}, {f['message']}"
        print(md)
        if args.out:
            with atomic_path(args.out, force=args.force) as tmp:
                tmp.mkdir(parents=True)
                (tmp / "fuzz.md").write_text(md + "\n")
                (tmp / "fuzz.json").write_text(to_json(summaries))
        if not failed and args.work is None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        return 1 if failed else 0
    except EdgesmithError as e:
        return user_error(e)


if __name__ == "__main__":
    sys.exit(main())
