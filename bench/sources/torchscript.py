"""A TorchScript file (``torch.jit.save``: .pt, .ts, .torchscript), exported to ONNX here and deployed like
any ONNX file (see ``torch_factory`` for the export and the example inputs it needs)."""
from __future__ import annotations

from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, file_digest, register_source
from edgesmith.common import EdgesmithError

SUFFIXES = (".pt", ".ts", ".torchscript", ".jit")


@register_source
class TorchScriptSource(ModelSource):
    name = "torchscript"
    traced = True
    description = "a TorchScript file saved with torch.jit.save (.pt, .ts, .torchscript), exported to ONNX here"
    options_help = "the ONNX source's options (kind, frame_seconds, state)"

    def matches(self, spec: str) -> bool:
        return Path(spec).suffix in SUFFIXES

    def load(self, spec: str, request: UserRequest):
        import torch

        from edgesmith.bench.sources.onnx_file import onnx_user_model, prepare
        from edgesmith.bench.sources.torch_factory import export_to_onnx

        path = Path(spec)
        if not path.is_file():
            raise EdgesmithError(f"model file {path} does not exist.", "check the path.")
        try:
            net = torch.jit.load(str(path), map_location="cpu").eval()
        except Exception as e:
            raise EdgesmithError(f"{path} is not a TorchScript module ({type(e).__name__}); a state dict or a pickled "
                                 "model cannot be loaded without its code.",
                                 "save it with torch.jit.save(torch.jit.script(model), path), or give "
                                 "file.py:factory.") from None
        with torch.no_grad():
            onnx_path, notes = export_to_onnx(net, path.name, file_digest(path), request)
        prepared, more = prepare(onnx_path)
        return onnx_user_model(prepared, path.name, request, notes + more)
