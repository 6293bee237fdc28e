"""Artifact formats: what a pass reads and writes, how its files are named, and which runtime runs it.

One registry replaces the tables that used to be spread over the packages (the format list, the in-memory
formats, the reference runtimes and the file suffixes). A new format is one ``register_format(Format(...))``
line here; its runtime is a name (the runtimes package registers the class), so nothing here imports a backend.
"""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import EdgesmithError
from edgesmith.common.registry import Registry

NETX_SUFFIXES = (".net", ".h5", ".hdf5")  # lava-dl's netx HDF5 files (the netx model source reads the same names)


@dataclass(frozen=True)
class Format:
    """One artifact format.

    ``in_memory``: the artifact carries a ``module`` (a torch module, a tree ensemble), else a ``path``.
    ``reference_runtime``: the runtime that runs it on this machine without a simulator: a model arriving in this
    format is the reference its variants are compared with on it, and ``edgesmith quantize`` scores with it.
    ``suffixes``: the file names a written artifact must end with ('' for in-memory formats or any name).
    ``export_pass``: the pass ``edgesmith export`` writes a torch model to a file of this format with, where it is
    not the model kind's own export (an ONNX file is the kind's: a graph, a step graph, a tree ensemble).
    ``reference_runtime`` is "" for a format written for another tool to load (an official checkpoint).
    """

    name: str
    description: str
    reference_runtime: str
    in_memory: bool = False
    suffixes: tuple[str, ...] = ()
    export_pass: str = ""

    def __post_init__(self):
        if not self.name:
            raise ValueError("a format needs a name")


FORMATS: Registry[Format] = Registry("artifact format")


def register_format(fmt: Format) -> Format:
    return FORMATS.register(fmt.name, fmt)


def get_format(name: str) -> Format:
    return FORMATS.get(name)


def format_names() -> list[str]:
    return FORMATS.names()


def reference_runtime(fmt: str) -> str:
    """The runtime that runs a ``fmt`` artifact here (its reference, or for a fixed-point file its bit-exact twin)."""
    name = get_format(fmt).reference_runtime
    if not name:
        raise EdgesmithError(f"no runtime here runs a {fmt} file ({get_format(fmt).description}).",
                             "deploy the model it was exported from instead.")
    return name


def format_of_file(path) -> Format | None:
    """The registered format whose file names end like ``path`` does (the longest suffix wins), or None."""
    name = str(getattr(path, "name", path))
    found = [(len(s), f) for f in (get_format(n) for n in format_names()) for s in f.suffixes if name.endswith(s)]
    return max(found, key=lambda t: t[0])[1] if found else None


def check_suffix(out, fmt: str, kind: str) -> None:
    """An output named for another format (an ONNX graph in ``q.pth``) is refused before any work."""
    suffixes = get_format(fmt).suffixes
    if suffixes and not out.name.endswith(suffixes):
        pth = (" (an RWKV model's quantized .pth comes from `edgesmith deploy`; `edgesmith export` makes an official "
               ".pth of it)") if out.suffix == ".pth" else ""
        raise EdgesmithError(f"{out.name}: the last pass, {kind}, writes a file of format {fmt!r}, which that name "
                             "does not say.", f"name the output {out.stem}{suffixes[0]}{pth}.")


register_format(Format("torch", "a torch module in memory", "torch", in_memory=True))
register_format(Format("trees", "a GBRL tree ensemble in memory (the Numba engine)", "trees", in_memory=True))
register_format(Format("onnx", "an ONNX graph file", "onnxruntime", suffixes=(".onnx",)))
register_format(Format("netx", "a lava-dl netx HDF5 network", "netx-ref", suffixes=NETX_SUFFIXES))
register_format(Format("nir", "a NIR graph (neuromorphic intermediate representation)", "nir-float", suffixes=(".nir",)))
register_format(Format("c", "C source compiled to a shared library", "c"))
register_format(Format("rwkv-c", "an RWKV-6/7 model as the C decoder's arrays", "rwkv-c", suffixes=(".rwkvc.npz",),
                       export_pass="export-rwkv-c"))
register_format(Format("rwkv-pth", "an RWKV-6/7 checkpoint in the official layout, for BlinkDL's rwkv package", "",
                       suffixes=(".pth",), export_pass="export-rwkv-pth"))
register_format(Format("lava", "the fixed-point S5 network for Lava, run here by its bit-exact Numba twin", "lrnn-ref"))
