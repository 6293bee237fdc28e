"""A ``torch.export`` program (``torch.export.save``: .pt2), exported to ONNX with the dynamo exporter and
deployed like any ONNX file. Its shapes are those it was exported with: a program exported at batch 1
keeps a fixed batch of 1 (the deploy then times batch 1 only)."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, file_digest, register_source
from edgesmith.bench.sources.safe_load import NeedsPickle, no_pickles, refuse_pickle, zip_members
from edgesmith.common import EdgesmithError


@register_source
class TorchExportSource(ModelSource):
    name = "torch-export"
    traced = True
    description = "a torch.export program saved with torch.export.save (.pt2), exported to ONNX here"
    options_help = "the ONNX source's options (kind, frame_seconds, state)"

    def matches(self, spec: str) -> bool:
        return Path(spec).suffix == ".pt2"

    def load(self, spec: str, request: UserRequest):
        import torch

        from edgesmith.bench.sources.onnx_file import onnx_user_model, prepare
        from edgesmith.bench.sources.torch_factory import export_to_onnx

        path = Path(spec)
        if not path.is_file():
            raise EdgesmithError(f"model file {path} does not exist.", "check the path.")
        if zip_members(path) is None:  # torch.export.save writes a zip: nothing else is handed to its loader
            raise EdgesmithError(f"{path} is not a torch.export program (not a zip archive).",
                                 "save it with torch.export.save(torch.export.export(model, args), path).")
        quiet = logging.getLogger("torch.export")  # it logs a damaged archive with a traceback, then raises
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            with contextlib.nullcontext() if request.trust_model_file else no_pickles():
                program = torch.export.load(str(path))
        except NeedsPickle:
            raise refuse_pickle(path, "is a torch.export program with pickled members") from None
        except Exception as e:
            raise EdgesmithError(f"{path} is not a torch.export program ({type(e).__name__}).",
                                 "save it with torch.export.save(torch.export.export(model, args), path).") from None
        finally:
            quiet.setLevel(level)
        onnx_path, notes = export_to_onnx(None, path.name, file_digest(path), request, program=program)
        prepared, more = prepare(onnx_path)
        return onnx_user_model(prepared, path.name, request, notes + more)
