"""RWKV-6/7 decoder in C: loads an ``export-rwkv-c`` file, compiles ``rwkv_step.c`` (AVX2 + FMA, OpenMP) once
into the cache and decodes one token per call through ctypes, batch 1, the state kept in NumPy arrays.

    dec = RWKVCDecoder(path, threads=1)      # the engine (benchmarks use it directly)
    logits = dec.step(token); dec.reset()
    get_runtime("rwkv-c").load(artifact).run(tokens)   # (batch, time) ids -> (batch, time, vocab) logits

4-bit and 8-bit block linears (the 8-bit ones: codebook/VQ layers and wider SQ codes, exactly) run on integer
kernels (int8 activations per group, ``_mm256_maddubs_epi16``); fp32 ones, LoRAs and the head on an FMA dot
product; the rows of every large matrix are split over ``threads``
OpenMP threads. ``threads`` None or 0 means every core.

Two layout and tuning choices serve the fp32 product's read rate (neither changes a result): an fp32 matrix with
more than 2048 inputs is held in column panels of at most 2048 (``panel_width``), so the input slice a pass reads
stays in the L1 cache; and the dot product's software prefetch distance is measured once per machine
(``tuned_prefetch_f32``, cached), since the best one differs: 2 KB on an Emerald Rapids VM, none on a Zen 4 VM.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import statistics
import time
import zipfile
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import Artifact
from edgesmith.compress.export_rwkv_c import HALF_GROUP, kernel_group, why_unavailable
from edgesmith.runtimes.base import Runtime, register_runtime

SOURCE = Path(__file__).with_name("rwkv_step.c")
MAX_JOBS = 8  # products the decoder batches into one parallel region
# the C file takes its buffer sizes from here, so the arrays allocated below always match what it indexes
CFLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC", "-std=gnu11",
          f"-DMAX_JOBS={MAX_JOBS}", f"-DMIN_GROUP={HALF_GROUP}")

_p = ctypes.c_void_p


class Mat(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int), ("cols", ctypes.c_int), ("group", ctypes.c_int), ("bits", ctypes.c_int),
                ("panel", ctypes.c_int), ("w", _p), ("q", _p), ("s", _p), ("z", _p), ("o", _p)]


LAYER_VECTORS = ("ln1_w", "ln1_b", "ln2_w", "ln2_b", "x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "v0",
                 "k_k", "k_a", "r_k", "lnx_w", "lnx_b", "ffn_x_k")
LAYER_MATS = ("w1", "w2", "a1", "a2", "v1", "v2", "g1", "g2", "r", "k", "v", "o", "fk", "fv")
SIZES = ("n_layer", "C", "H", "N", "V", "F", "D", "version")
# per code width: the codes' array and type, bytes per row and 64 inputs, and the per-group array beside the
# scales (4 bits: integer zero points z; 8 bits: float offsets o)
KERNEL_ARRAYS = {4: ("q", np.uint8, 32, "z", np.uint8), 8: ("q8", np.int8, 64, "o", np.float32)}


class Layer(ctypes.Structure):
    _fields_ = [(n, _p) for n in LAYER_VECTORS] + [(n, Mat) for n in LAYER_MATS]


LAYER6_VECTORS = ("ln1_w", "ln1_b", "ln2_w", "ln2_b", "maa_x", "maa_w", "maa_k", "maa_v", "maa_r", "maa_g",
                  "time_decay", "faaaa", "lnx_w", "lnx_b", "ffn_maa_k", "ffn_maa_r")
LAYER6_MATS = ("maa1", "maa2_0", "maa2_1", "maa2_2", "maa2_3", "maa2_4", "dec1", "dec2", "r", "k", "v", "o", "g",
               "fk", "fr", "fv")


class Layer6(ctypes.Structure):  # maa2_0 .. maa2_4 lie where the C struct has Mat maa2[5]
    _fields_ = [(n, _p) for n in LAYER6_VECTORS] + [(n, Mat) for n in LAYER6_MATS]


class Model(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_int) for n in SIZES] +
                [(n, _p) for n in ("emb", "ln0_w", "ln0_b", "lnout_w", "lnout_b")] + [("head", Mat)] +
                [(n, _p) for n in ("layers", "att_x", "ffn_x", "wkv", "scratch", "xq", "xs", "xsx")])


_LIB = None


def library():
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(str(compile_shared_path()))
        lib.rwkv_set_threads.argtypes, lib.rwkv_set_threads.restype = [ctypes.c_int], ctypes.c_int
        lib.rwkv_step.argtypes, lib.rwkv_step.restype = [ctypes.POINTER(Model), ctypes.c_int, _p], ctypes.c_int
        lib.rwkv_gemv.argtypes = [ctypes.POINTER(Model), ctypes.POINTER(Mat), _p, _p]
        lib.rwkv_gemv.restype = ctypes.c_int
        lib.rwkv_read_probe.argtypes, lib.rwkv_read_probe.restype = [_p, ctypes.c_long], ctypes.c_double
        lib.rwkv_set_prefetch_f32.argtypes, lib.rwkv_set_prefetch_f32.restype = [ctypes.c_int], ctypes.c_int
        lib.rwkv_f32_rows.argtypes = [_p, ctypes.c_int, ctypes.c_int, _p, _p]
        lib.rwkv_f32_rows.restype = ctypes.c_int
        _LIB = lib
    return _LIB


PREFETCH_CHOICES = (0, 512, 1024, 2048, 4096)  # bytes; 0: the hardware prefetcher alone
PREFETCH_MARGIN = 0.03  # rates this close to the fastest count as ties, which the shorter distance wins


def measure_prefetch_f32(n_bytes: int, choices=PREFETCH_CHOICES, reps: int = 11, cols: int = 2048) -> dict:
    """The fp32 dot product's read rate (bytes/s) over an ``n_bytes`` matrix of ``cols`` columns on one thread, per
    software prefetch distance: the median of ``reps`` passes, the distances taken in turn within each rep so that
    all see the same load. MEASURED, by the decoder's own kernel (``rwkv_f32_rows``)."""
    lib = library()
    w = np.ones((max(n_bytes // (4 * cols), 1), cols), np.float32)  # written, so every page is really there
    x, y = np.ones(cols, np.float32), np.empty(len(w), np.float32)
    times = {d: [] for d in choices}
    before = lib.rwkv_set_prefetch_f32(-1)
    try:
        lib.rwkv_f32_rows(w.ctypes.data, len(w), cols, x.ctypes.data, y.ctypes.data)  # warm-up
        for _ in range(reps):
            for d in choices:
                lib.rwkv_set_prefetch_f32(d)
                t = time.perf_counter()
                lib.rwkv_f32_rows(w.ctypes.data, len(w), cols, x.ctypes.data, y.ctypes.data)
                times[d].append(time.perf_counter() - t)
    finally:
        lib.rwkv_set_prefetch_f32(before)
    return {d: w.nbytes / statistics.median(t) for d, t in times.items()}


def choose_prefetch(rates: dict) -> int:
    """The distance to use given the read rate at each: the shortest within PREFETCH_MARGIN of the fastest. Rates a
    few percent apart are within one machine's run-to-run noise, and a shorter distance (0: the hardware prefetcher
    alone) assumes less; on the Emerald Rapids VM the 2 KB prefetch read 30% faster, far past the margin."""
    fastest = max(rates.values())
    return min(d for d, r in rates.items() if r * (1 + PREFETCH_MARGIN) >= fastest)


def tuning_bytes() -> int:
    """A matrix four times the last-level cache (so every pass streams from DRAM), 128 to 512 MiB."""
    from edgesmith.hardware.host_cpu import last_level_cache_bytes

    return min(max(4 * (last_level_cache_bytes() or 0), 128 * 2**20), 512 * 2**20)


def tuned_prefetch_f32() -> dict:
    """The fp32 prefetch distance for this machine: measured once (about a second) and cached per CPU model and
    kernel build. Returns the record: ``bytes`` (``choose_prefetch``'s pick), ``rates_GBps`` per distance, the CPU, the
    matrix size and the date."""
    from edgesmith.common import cache_dir, cached
    from edgesmith.hardware.host_cpu import cpu_identity

    ident = cpu_identity()
    cpu = f"{ident['model_name']} (vendor {ident['vendor']}, family {ident['family']}, model {ident['model']})"
    so = compile_shared_path()
    key = hashlib.sha256(f"{cpu}|{so.name}".encode()).hexdigest()[:16]

    def make() -> dict:
        n = tuning_bytes()
        rates = measure_prefetch_f32(n)
        return {"bytes": choose_prefetch(rates), "rates_GBps": {str(d): r / 1e9 for d, r in rates.items()},
                "cpu": cpu, "matrix_MiB": n / 2**20, "kernel": so.name,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "provenance": "measured"}

    def load(path: Path) -> dict:
        rec = json.loads(path.read_text())
        if rec.get("cpu") != cpu or rec.get("bytes") not in PREFETCH_CHOICES:
            raise ValueError("stale record")
        return rec

    rec, _ = cached(cache_dir() / "c_rt" / f"prefetch-f32-{key}.json", make, load=load,
                    save=lambda v, tmp: tmp.write_text(json.dumps(v, indent=1)))
    return rec


def compile_shared_path() -> Path:
    from edgesmith.runtimes.c_rt import compile_shared

    return compile_shared(SOURCE, CFLAGS)


def read_rwkv_c(path) -> tuple[dict, dict]:
    """The arrays and sizes of an ``export-rwkv-c`` file, with a readable error for anything else."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        sizes = json.loads(str(arrays.pop("config")))
        missing = [k for k in SIZES if k not in sizes]
        if missing:
            raise KeyError(missing)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise EdgesmithError(f"{path} is not an export-rwkv-c file ({type(e).__name__}: {e}).",
                             "re-export the model: edgesmith export MODEL --out FILE.rwkvc.npz.") from None
    return arrays, sizes


PANEL_FLOATS = 2048  # the widest input slice an fp32 product reads per pass: 8 KB, a quarter of a 32 KB L1


def panel_width(cols: int) -> int:
    """The column-panel width of an fp32 matrix with ``cols`` inputs: 0 (row-major) up to PANEL_FLOATS, else the
    input split into the fewest near-equal panels of at most PANEL_FLOATS, a multiple of 32 floats wide (the
    last may be narrower)."""
    if cols <= PANEL_FLOATS:
        return 0
    panels = -(-cols // PANEL_FLOATS)  # ceiling divisions
    per_panel = -(-cols // panels)
    return -(-per_panel // 32) * 32


def to_panels(w: np.ndarray, width: int) -> np.ndarray:
    """``w`` (rows, cols) as ``rwkv_step.c``'s panel layout: each ``width``-column panel row-major, panel after panel."""
    return np.concatenate([np.ascontiguousarray(w[:, c:c + width], np.float32).ravel()
                           for c in range(0, w.shape[1], width)])


class RWKVCDecoder:
    """Greedy-decoding engine over one ``export-rwkv-c`` file: ``step(token)`` -> logits (a fresh array).
    ``prefetch_f32``: the fp32 dot product's software prefetch distance in bytes (0: none); None takes the one
    tuned on this machine (``tuned_prefetch_f32``). It changes the speed, never a result."""

    def __init__(self, path, threads: int | None = 1, prefetch_f32: int | None = None):
        if prefetch_f32 is not None and (isinstance(prefetch_f32, bool) or not isinstance(prefetch_f32, int)
                                         or not 0 <= prefetch_f32 <= 65536):
            raise EdgesmithError(f"prefetch_f32 is {prefetch_f32!r}; it must be a whole number of bytes from 0 to 65536.",
                                 "pass None to use the distance measured on this machine.")
        self.path, self.threads = Path(path), threads
        self.arrays_, self.sizes_ = read_rwkv_c(self.path)
        self.panels_ = {}  # wide fp32 matrices in the kernel's panel layout (their ".w" leaves arrays_)
        self._build()
        self.prefetch_f32_ = tuned_prefetch_f32()["bytes"] if prefetch_f32 is None else prefetch_f32

    def _ptr(self, name: str, dtype) -> int:
        a = self.arrays_[name]
        if a.dtype != dtype or not a.flags.c_contiguous:
            a = self.arrays_[name] = np.ascontiguousarray(a, dtype=dtype)
        return a.ctypes.data

    def _mat(self, name: str, rows: int, cols: int) -> Mat:
        if f"{name}.w" in self.arrays_:
            w = self.arrays_[f"{name}.w"]
            self._check(name, w.shape, (rows, cols))
            width = panel_width(cols)
            if not width:
                return Mat(rows, cols, 0, 32, 0, self._ptr(f"{name}.w", np.float32), None, None, None, None)
            self.panels_[name] = to_panels(w, width)
            del self.arrays_[f"{name}.w"]  # the panels replace it: one copy of the weights in memory
            return Mat(rows, cols, 0, 32, width, self.panels_[name].ctypes.data, None, None, None, None)
        bits = 8 if f"{name}.q8" in self.arrays_ else 4
        codes, code_type, width, extra, extra_type = KERNEL_ARRAYS[bits]
        q, s = self.arrays_[f"{name}.{codes}"], self.arrays_[f"{name}.s"]
        if rows % 4 or cols % 64 or s.ndim != 3:
            raise EdgesmithError(f"{self.path}: {name} ({rows} x {cols}) is not in the {bits}-bit kernel's layout.",
                                 "re-export the model with export-rwkv-c.")
        self._check(name, q.shape, (rows // 4, cols // 64, 4, width))
        group = cols // max(s.shape[1], 1)
        self._check(name, s.shape, (rows // 4, cols // group, 4))
        self._check(name, self.arrays_[f"{name}.{extra}"].shape, s.shape)
        if not kernel_group(group) or group * s.shape[1] != cols:
            raise EdgesmithError(f"{self.path}: {name} has groups of {cols}/{s.shape[1]} inputs.",
                                 "re-export the model with a group of 32 or a multiple of 64.")
        extra_ptr = self._ptr(f"{name}.{extra}", extra_type)
        return Mat(rows, cols, group, bits, 0, None, self._ptr(f"{name}.{codes}", code_type),
                   self._ptr(f"{name}.s", np.float32), extra_ptr if extra == "z" else None,
                   extra_ptr if extra == "o" else None)

    def _check(self, name, got, want) -> None:
        if tuple(got) != tuple(want):
            raise EdgesmithError(f"{self.path}: {name} has shape {tuple(got)}, the model's sizes say {tuple(want)}.",
                                 "re-export the model; the file was edited or damaged.")

    def _build(self) -> None:
        s = self.sizes_
        L, C, H, N, V, F, D, version = (int(s[k]) for k in SIZES)
        a = self.arrays_
        if "emb" not in a or version not in (6, 7):
            raise EdgesmithError(f"{self.path} has no embedding or an unknown RWKV version ({version}).",
                                 "re-export the model with export-rwkv-c.")
        self._check("emb", a["emb"].shape, (V, C))
        struct, vectors, mats = (Layer6, LAYER6_VECTORS, LAYER6_MATS) if version == 6 else \
            (Layer, LAYER_VECTORS, LAYER_MATS)
        layers = (struct * L)()
        lin = {"r": (C, C), "k": (C, C), "v": (C, C), "o": (C, C), "g": (C, C), "fr": (C, C), "fk": (F, C),
               "fv": (C, F)}
        lora_in = ("w1", "a1", "v1", "g1", "maa1", "dec1")  # LoRA first halves: their rows are the hidden width
        widths = {}
        try:
            for i in range(L):
                p = f"L{i}."
                for v in vectors:
                    n = H * N if v in ("r_k", "faaaa") else C
                    self._check(p + v, (a[p + v].size,), (n,))
                    setattr(layers[i], v, self._ptr(p + v, np.float32))
                for m in mats:  # LoRA widths differ per LoRA: take each from its array
                    rows, cols = lin.get(m) or a[f"{p}{m}.w"].shape
                    if m not in lin:
                        widths[m] = rows if m in lora_in else cols
                    setattr(layers[i], m, self._mat(p + m, rows, cols))
                if not self._loras_fit(widths, D, version):
                    raise EdgesmithError(f"{self.path}: layer {i}'s LoRA widths {widths} do not fit the file's "
                                         f"D = {D}.", "re-export the model with export-rwkv-c.")
        except KeyError as e:
            raise EdgesmithError(f"{self.path} lacks the array {e}.", "re-export the model with export-rwkv-c.") from None
        self.layers_ = layers
        self.att_x_ = np.zeros((L, C), np.float32)
        self.ffn_x_ = np.zeros((L, C), np.float32)
        self.wkv_ = np.zeros((L, H, N, N), np.float32)
        self.scratch_ = np.zeros(19 * C + F + 5 * D, np.float32)
        self.xq_ = np.zeros(MAX_JOBS * max(C, F), np.int8)  # one quantized input per product of a batch
        self.xs_ = np.zeros(MAX_JOBS * (max(C, F) // HALF_GROUP + 1), np.float32)  # per activation group
        self.xsx_ = np.zeros_like(self.xs_)
        m = Model(L, C, H, N, V, F, D, version, self._ptr("emb", np.float32), self._ptr("ln0_w", np.float32),
                  self._ptr("ln0_b", np.float32), self._ptr("lnout_w", np.float32), self._ptr("lnout_b", np.float32),
                  self._mat("head", V, C), ctypes.addressof(layers), self.att_x_.ctypes.data, self.ffn_x_.ctypes.data,
                  self.wkv_.ctypes.data, self.scratch_.ctypes.data, self.xq_.ctypes.data, self.xs_.ctypes.data,
                  self.xsx_.ctypes.data)
        self.model_ = m
        self.lib_ = library()
        self.reset()

    @staticmethod
    def _loras_fit(widths: dict, D: int, version: int) -> bool:
        """The decoder's LoRA buffers are 5 D floats: RWKV-7 keeps four hidden vectors of up to D (and the gate's
        sigmoid), RWKV-6 the five mixes' hidden values (5 x one width, read as five slices) and the decay's."""
        if version == 7:
            return max(widths.values()) <= D
        mix = {widths[f"maa2_{i}"] for i in range(5)}
        return len(mix) == 1 and widths["maa1"] == 5 * mix.pop() and widths["maa1"] + widths["dec1"] <= 5 * D

    @property
    def vocab_size(self) -> int:
        return int(self.sizes_["V"])

    def reset(self) -> None:
        """Back to the state before the first token (the trained initial wkv state where the model has one)."""
        self.att_x_[:] = 0.0
        self.ffn_x_[:] = 0.0
        self.wkv_[:] = self.arrays_["init_wkv"] if "init_wkv" in self.arrays_ else 0.0

    def _configure(self) -> None:
        """The library's settings are process-wide: each call sets this decoder's."""
        self.lib_.rwkv_set_threads(int(self.threads or 0))
        self.lib_.rwkv_set_prefetch_f32(self.prefetch_f32_)

    def step(self, token: int) -> np.ndarray:
        logits = np.empty(self.vocab_size, np.float32)
        self._configure()
        if self.lib_.rwkv_step(ctypes.byref(self.model_), int(token), logits.ctypes.data) != 0:
            raise EdgesmithError(f"token id {token} is outside the vocabulary [0, {self.vocab_size}).",
                                 "tokenize with the model's tokenizer.")
        return logits

    def gemv(self, name: str, x: np.ndarray) -> np.ndarray:
        """One of the model's linears ("L0.fk", "head", ...) applied to ``x``, by the decoder's own kernel."""
        i, _, m = name.partition(".")
        mat = self.model_.head if name == "head" else getattr(self.layers_[int(i[1:])], m)
        x = np.ascontiguousarray(x, np.float32)
        y = np.empty(mat.rows, np.float32)
        self._configure()
        self.lib_.rwkv_gemv(ctypes.byref(self.model_), ctypes.byref(mat), x.ctypes.data, y.ctypes.data)
        return y


@register_runtime
class RWKVCRuntime(Runtime):
    name = "rwkv-c"
    contract_fixture = "rwkv-c"
    formats = ("rwkv-c",)
    multi_input = True  # a step: {"token": (B,), "att_x": (B, L, C), "ffn_x": ..., "wkv": (B, L, H, N, N)}
    description = ("RWKV-6/7 decoder in C (gcc -O3 -mavx2 -mfma -fopenmp): 4- and 8-bit block linears on "
                   "int8-activation AVX2 kernels, fp32 ones in L1-sized column panels with a prefetch distance "
                   "tuned on this machine, batch-1 steps through ctypes")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        why = why_unavailable()
        return (not why), why

    def _load(self, artifact: Artifact) -> None:
        self.decoder_ = RWKVCDecoder(artifact.path, threads=self.threads)

    def _run(self, x) -> tuple:
        if isinstance(x, dict):
            return self._run_step(x)
        if x.dtype.kind not in "iu" or x.ndim != 2:
            raise EdgesmithError(f"the rwkv-c runtime takes token ids (batch, time) of integers, not {x.dtype} "
                                 f"{tuple(x.shape)}.", "pass int64 token ids shaped (batch, time).")
        dec = self.decoder_
        out = np.empty((*x.shape, dec.vocab_size), np.float32)
        for b in range(x.shape[0]):  # every sequence from the starting state, as the torch model's forward
            dec.reset()
            for t in range(x.shape[1]):
                out[b, t] = dec.step(int(x[b, t]))
        return out, {"threads": self.threads or "all cores", "tokens": int(x.size)}

    def _run_step(self, feed: dict) -> tuple[dict, dict]:
        """One token per sequence with the state given (the step interface of ``runtimes.stateful``): each
        sequence's state is copied in, stepped, and copied out."""
        dec = self.decoder_
        own = {"att_x": dec.att_x_, "ffn_x": dec.ffn_x_, "wkv": dec.wkv_}
        missing = [k for k in ("token", *own) if k not in feed]
        if missing:
            raise EdgesmithError(f"a step of the rwkv-c runtime needs {', '.join(missing)}.",
                                 "feed token, att_x, ffn_x and wkv (runtimes.stateful.step_feed does).")
        tokens = np.asarray(feed["token"]).reshape(-1)
        for k, a in own.items():
            if feed[k].shape != (len(tokens), *a.shape):
                raise EdgesmithError(f"state {k} has shape {feed[k].shape}, the model's is (batch, "
                                     f"{', '.join(map(str, a.shape))}).", "start from runtimes.stateful.zero_state.")
        out = {"logits": np.empty((len(tokens), dec.vocab_size), np.float32),
               **{f"{k}_out": np.empty_like(feed[k], dtype=np.float32) for k in own}}
        for b, token in enumerate(tokens):
            for k, a in own.items():
                np.copyto(a, feed[k][b])
            out["logits"][b] = dec.step(int(token))
            for k, a in own.items():
                out[f"{k}_out"][b] = a
        return out, {"threads": self.threads or "all cores", "tokens": int(len(tokens))}
