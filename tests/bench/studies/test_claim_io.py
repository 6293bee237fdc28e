"""The claim scripts' shared output helpers."""
import shlex
import sys

from edgesmith.bench.studies.claim_io import claim_command


def test_claim_command_quotes_arguments_so_the_recorded_command_reruns(monkeypatch):
    argv = ["--option", "int8_op_types=[]", "--out", "runs/a b"]
    cmd = claim_command("edgesmith.bench.studies.shapes_architectures", argv)
    assert cmd.startswith("python -m edgesmith.bench.studies.shapes_architectures ")
    assert shlex.split(cmd)[3:] == argv  # a shell splits it back into the same arguments
    monkeypatch.setattr(sys, "argv", ["prog", "--quick"])  # no argv given: the process's own
    assert claim_command("m", None) == "python -m m --quick"
