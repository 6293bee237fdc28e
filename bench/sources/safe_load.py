"""Model files are code in disguise: a pickle inside a ``.pt2``, ``.pt`` or ``.pth`` runs whatever it names when it
is unpickled. edgesmith reads them without unpickling anything the user did not vouch for: tensors through torch's
weights-only unpickler, TorchScript through its own loader (which builds TorchScript values only), and everything
else refused with one line naming ``--trust-model-file``, the flag that allows a real pickle for a file the user
trusts."""
from __future__ import annotations

import contextlib
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Iterator

from edgesmith.common import EdgesmithError

TRUST_FLAG = "--trust-model-file"


class NeedsPickle(Exception):
    """Raised inside ``no_pickles`` where a loader was about to unpickle Python objects."""


def _refuse(*args, **kwargs):
    raise NeedsPickle()


@contextlib.contextmanager
def no_pickles() -> Iterator[None]:
    """While the block runs, ``torch.load`` is weights-only whatever its caller asks, and Python's and TorchScript's
    object unpicklers refuse (``NeedsPickle``): a third-party loader (``torch.export.load``) that would unpickle a
    member of the file cannot. The CLI runs one load at a time, so patching the modules is safe here."""
    import torch

    real_load = torch.load

    def weights_only_load(*args, **kwargs):
        kwargs["weights_only"] = True
        try:
            with warnings.catch_warnings():  # its note on a pickle protocol is noise here: the load is refused anyway
                warnings.simplefilter("ignore", UserWarning)
                return real_load(*args, **kwargs)
        except pickle.UnpicklingError:  # an object the weights-only unpickler does not allow
            raise NeedsPickle() from None

    patches = [(torch, "load", weights_only_load), (pickle, "loads", _refuse), (pickle, "load", _refuse),
               (torch._C, "_pickle_load_obj", _refuse)]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    try:
        for mod, name, value in patches:
            setattr(mod, name, value)
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def refuse_pickle(path: Path, what: str) -> EdgesmithError:
    """The one message for a model file that needs a real pickle: what it holds, and the flag that allows it."""
    return EdgesmithError(f"{path} {what}: loading it would run code stored in the file.",
                          f"if you trust where the file came from, pass {TRUST_FLAG}; otherwise save the model as "
                          "ONNX, TorchScript (torch.jit.save) or a state dict of tensors.")


def zip_members(path: Path) -> list[str] | None:
    """The member names of a zip archive (torch's file formats are zips), or None for anything else."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return None


def is_torchscript(members: list[str]) -> bool:
    """A TorchScript archive carries its compiled code (``ARCHIVE/code/``); ``torch.save`` writes only a pickle
    (``ARCHIVE/data.pkl``) that names Python classes to import."""
    return any("/code/" in m for m in members)
