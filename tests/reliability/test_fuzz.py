"""A fixed sample of the fuzz run (``bench/benchmarks/fuzz_inputs.py`` runs hundreds per format): mutated files of
every input format edgesmith reads exit 0, or 2 with one line, and leave nothing behind."""
from __future__ import annotations

import pytest

from edgesmith.bench.fuzz import FORMATS, OUTCOMES, fuzz, mutate

SAMPLE = (0, 1, 2, 7)  # a few fixed case numbers per format; the benchmark covers the rest


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    return {s.format: s for s in fuzz(list(FORMATS), 0, tmp_path_factory.mktemp("fuzz"), only=SAMPLE,
                                      timeout_s=120)}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_mutated_files_of_each_format_end_cleanly(summaries, name):
    s = summaries[name]
    assert s.seed_clean, s.failures  # the command reads a valid file of the format to the end
    assert s.cases == len(SAMPLE) and s.counts["clean"] == s.cases, s.failures


def test_a_case_is_made_from_its_number_alone():
    fmt = FORMATS["onnx"]
    data = bytes(range(256)) * 8
    assert mutate(fmt, data, 5) == mutate(fmt, data, 5) and mutate(fmt, data, 5) != mutate(fmt, data, 6)
    assert set(OUTCOMES) == {"clean", "internal", "hang", "leftover", "other"}
