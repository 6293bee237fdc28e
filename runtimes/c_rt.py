"""C runtime: compiles an exported C model (``export-tree-c``) with gcc into a cached shared library
and calls its ``gbt_predict_batch(const float *x, int n, float *out)`` through ctypes.

The library is cached under ``cache_dir()/c_rt`` by a hash of the source and the compiler flags,
so reloading the same export does not recompile.
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess

import numpy as np

from edgesmith.compress.base import Artifact
from edgesmith.common import EdgesmithError, atomic_path, cache_dir
from edgesmith.runtimes.base import Runtime, register_runtime

CFLAGS = ("-O2", "-shared", "-fPIC", "-std=c99")


def compile_shared(source_path, flags: tuple[str, ...] = CFLAGS):
    """Path of the cached ``.so`` built from ``source_path`` (built now if missing)."""
    src = source_path.read_bytes()
    key = hashlib.sha256(src + " ".join(flags).encode()).hexdigest()[:24]
    so = cache_dir() / "c_rt" / f"{key}.so"
    if not so.exists():
        with atomic_path(so, force=True) as tmp:
            proc = subprocess.run(["gcc", *flags, "-o", str(tmp), str(source_path), "-lm"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["no message"])[0]
                raise EdgesmithError(f"gcc could not compile {source_path}: {first[:300]}",
                                     "re-export the model; the C file may be damaged.")
    return so


@register_runtime
class CRuntime(Runtime):
    name = "c"
    contract_fixture = "tree-c"
    formats = ("c",)
    description = "exported C source compiled with gcc -O2 -shared -fPIC, called via ctypes (one thread)"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if shutil.which("gcc") is None:
            return False, "gcc is not on PATH. Fix: install gcc (apt-get install gcc)."
        return True, ""

    def _load(self, artifact: Artifact) -> None:
        t_so = compile_shared(artifact.path)
        self.lib_ = ctypes.CDLL(str(t_so))
        fn = getattr(self.lib_, artifact.meta.get("c_entry", "gbt_predict_batch"))
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        self.fn_ = fn
        self.n_out_ = int(self.lib_.gbt_n_outputs())
        self.n_in_ = int(self.lib_.gbt_n_inputs())
        self.so_path_ = t_so

    def _check_shape(self, x: np.ndarray) -> None:
        super()._check_shape(x)
        if x.ndim != 2 or x.shape[1] != self.n_in_:
            raise EdgesmithError(f"input has shape {tuple(x.shape)} but the C model takes (batch, {self.n_in_}).",
                                 "reshape the input to the model's input shape.")

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        out = np.empty((x.shape[0], self.n_out_), np.float32)
        self.fn_(x.ctypes.data, int(x.shape[0]), out.ctypes.data)
        return out, {"threads": 1, "library": str(self.so_path_)}
