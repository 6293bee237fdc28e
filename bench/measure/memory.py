"""Memory figures of a measurement: artifact size on disk, resident set size now and at its peak.

Peak RSS is the process's high-water mark over its whole life, which is why latency and memory are
measured in a fresh process per artifact (``bench.measure.latency.measure_isolated``): in a process that has
already built or loaded other models, the peak says nothing about the one being measured.
"""
from __future__ import annotations

import dataclasses
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

from edgesmith.compress.base import Artifact


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes.

    On Linux this is ``VmHWM`` from ``/proc/self/status``, the high-water mark of this process's own
    address space. ``getrusage``'s ``ru_maxrss`` is the fallback only: Linux carries it across
    ``exec``, so a worker started by a 450 MB parent reports 450 MB however little it uses itself.
    ``ru_maxrss`` is in KiB on Linux and in bytes on macOS.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def current_rss_bytes() -> int:
    """Resident set size of this process now, in bytes (``/proc/self/statm``; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import psutil

        return int(psutil.Process().memory_info().rss)


def _graph_tensors(graph):
    """Every tensor of an ONNX graph: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for sub in attr.graphs:
                yield from _graph_tensors(sub)


def _onnx_external_files(path: Path) -> list[Path]:
    """Files holding an ONNX model's external tensor data (weights saved beside the graph)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # a corrupt file has no readable external data; its own size is all there is
        return []
    files = set()
    for tensor in _graph_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    files.add(path.parent / entry.value)
    return sorted(f for f in files if f.is_file())


def artifact_size_bytes(artifact: Artifact) -> int:
    """Bytes the artifact needs on disk, including an ONNX model's external weight files.

    A ``torch`` artifact is in memory: its size is the fp32 parameter and buffer bytes a state dict
    would hold (``Artifact.size_bytes``).
    """
    size = artifact.size_bytes()
    if artifact.path is not None and artifact.path.is_file() and artifact.path.suffix == ".onnx":
        size += sum(f.stat().st_size for f in _onnx_external_files(artifact.path))
    return size


@dataclass
class MemoryStats:
    """Memory of one measured artifact in its own process.

    ``rss_before_load_bytes`` is taken after the interpreter, edgesmith and the backend library are
    imported, so ``load_cost_bytes`` is what loading this artifact added. ``peak_rss_bytes`` is the
    whole process's peak (imports, load and the timed runs). Memory of processes a runtime starts
    itself (the Lava simulator runs in its own interpreter) is not included.
    """

    artifact_size_bytes: int
    rss_before_load_bytes: int
    rss_after_load_bytes: int
    peak_rss_bytes: int
    isolated: bool = True

    @property
    def load_cost_bytes(self) -> int:
        return self.rss_after_load_bytes - self.rss_before_load_bytes

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "load_cost_bytes": self.load_cost_bytes}

    @classmethod
    def from_dict(cls, d: dict) -> "MemoryStats":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
