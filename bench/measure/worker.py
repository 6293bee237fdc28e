"""The fresh process behind ``bench.measure.latency.measure_isolated``: load one artifact, time it, report.

    python -m edgesmith.bench.measure.worker WORKDIR

WORKDIR holds ``spec.json`` (runtime, threads, counts, artifact) and ``inputs0.npz``, ``inputs1.npz``, ... (one per
batch size, in the order to time them; each one array under the name "", or one per input name). The worker loads
the artifact once, times each input set in turn and writes ``result0.json`` (latency samples and memory: the peak
RSS by the end of that set's timing), ``outputs0.npy`` and so on; a user error is written to ``error.json`` so the
parent can raise it unchanged. One process per artifact keeps its timing free of what other measurements left
behind and makes its peak RSS its own; the parent sends batch sizes in ascending order, so each peak is that batch's.
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np

# Backends that import their library lazily inside load(); importing it before the "before load"
# RSS reading keeps the library's own footprint out of the artifact's load cost.
_BACKEND_LIBRARIES = {"onnxruntime": "onnxruntime", "torch": "torch", "tvm": "tvm"}


class _ExportedModule:
    """Makes a loaded ``torch.export`` program usable by the torch runtime.

    ``ExportedProgram.module()`` refuses ``eval()``; the program was traced from a module already in
    eval mode, so train/eval flags cannot change what it computes and are ignored here.
    """

    def __init__(self, graph_module):
        self.graph_module = graph_module

    def eval(self):
        return self

    def __call__(self, x):
        return self.graph_module(x)


def _load_artifact(spec: dict):
    from edgesmith.compress.base import Artifact

    if spec["format"] == "torch":
        import torch

        module = _ExportedModule(torch.export.load(spec["path"]).module())
        return Artifact("torch", module=module, meta=spec.get("meta", {}))
    if spec.get("loader"):  # an in-memory model saved by its own class (e.g. a tree ensemble)
        module_name, _, cls_name = spec["loader"].partition(":")
        cls = getattr(importlib.import_module(module_name), cls_name)
        return Artifact(spec["format"], module=cls.load(spec["path"]), meta=spec.get("meta", {}))
    return Artifact(spec["format"], path=Path(spec["path"]), meta=spec.get("meta", {}))


def measure(workdir: Path) -> None:
    spec = json.loads((workdir / "spec.json").read_text())
    library = _BACKEND_LIBRARIES.get(spec["runtime"])

    from edgesmith.bench.measure.latency import measure_latency
    from edgesmith.bench.measure.memory import current_rss_bytes, peak_rss_bytes
    from edgesmith.common import write_json
    from edgesmith.runtimes import get_runtime

    if library is not None:
        try:
            importlib.import_module(library)
        except ImportError:  # the runtime itself reports a missing library with a proper message
            pass
    rt = get_runtime(spec["runtime"], threads=spec["threads"], **spec.get("runtime_options", {}))
    before = current_rss_bytes()
    rt.load(_load_artifact(spec["artifact"]))
    after = current_rss_bytes()
    for i in range(int(spec.get("sets", 1))):
        with np.load(workdir / f"inputs{i}.npz", allow_pickle=False) as z:
            x = z[""] if z.files == [""] else {k: z[k] for k in z.files}
        stats = measure_latency(rt, x, warmup=spec["warmup"], reps=spec["reps"], min_time_s=spec["min_time_s"],
                                method=spec["method"], precision=spec.get("precision", 0.0))
        outputs = rt.run(x).outputs
        np.save(workdir / f"outputs{i}.npy", outputs)
        write_json(workdir / f"result{i}.json", {
            "latency": stats.to_dict(),
            "memory": {"rss_before_load_bytes": before, "rss_after_load_bytes": after, "peak_rss_bytes": peak_rss_bytes()},
        })


def main(argv: list[str] | None = None) -> int:
    from edgesmith.common import EdgesmithError, write_json

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m edgesmith.bench.measure.worker WORKDIR", file=sys.stderr)
        return 2
    workdir = Path(argv[0])
    try:
        measure(workdir)
    except EdgesmithError as e:
        write_json(workdir / "error.json", {"problem": e.problem, "fix": e.fix})
        print(f"EdgesmithError: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
