"""A TorchScript file (``torch.jit.save``: .pt, .ts, .torchscript), exported to ONNX here and deployed like
any ONNX file (see ``torch_factory`` for the export and the example inputs it needs)."""
from __future__ import annotations

from pathlib import Path

from edgesmith.bench.sources.base import ModelSource, UserRequest, file_digest, register_source
from edgesmith.bench.sources.safe_load import is_torchscript, refuse_pickle, zip_members
from edgesmith.common import EdgesmithError, raised

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
        members = zip_members(path)
        if members is not None and not is_torchscript(members):  # torch.save(model): a pickle of Python classes
            if not request.trust_model_file:
                raise refuse_pickle(path, "is a pickled model (torch.save), not TorchScript")
            with torch.no_grad():
                net = _trusted_module(path)
            onnx_path, notes = export_to_onnx(net, path.name, file_digest(path), request)
            prepared, more = prepare(onnx_path)
            return onnx_user_model(prepared, path.name, request, notes + more)
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


def _trusted_module(path: Path):
    """A module pickled whole by ``torch.save``, unpickled because the user said ``--trust-model-file`` (its classes
    must be importable here)."""
    import torch

    try:
        net = torch.load(path, map_location="cpu", weights_only=False)
    except (Exception, SystemExit) as e:
        raise EdgesmithError(f"{path} could not be unpickled: {raised(e)}",
                             "make the model's classes importable (PYTHONPATH), or save it with torch.jit.save.") from None
    from edgesmith.bench.sources.torch_factory import as_module

    return as_module(net, f"{path} holds", "save the module itself, or its TorchScript (torch.jit.save).")
