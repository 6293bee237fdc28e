"""Benchmarks and claim scripts: ``python -m edgesmith.bench.benchmarks.NAME`` (pytest-benchmark files run with ``make benchmark``)."""
