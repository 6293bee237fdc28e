"""pytest-benchmark files, run with ``make benchmark``: timed, side by side in one process.

Studies and paper-claim scripts (``python -m edgesmith.bench.studies.NAME``) live in ``bench/studies/``.
"""
