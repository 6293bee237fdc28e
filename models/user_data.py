"""Users' own data: arrays for each named model input, checked against what the model declares.

    .npy            one array, for a model with one input
    .npz            one array per input name (plus ``labels`` or ``targets`` if given)
    folder          every .npy / .npz in it (sorted by name), concatenated along the batch axis
    .txt / folder   UTF-8 text for token-lm models, tokenized with the model's tokenizer (``load_text``)

Every array is checked before anything runs: present for each input, not empty, numeric, finite,
of a dtype the input can take, with the input's rank and fixed dimensions; a problem names the input.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError, regular_file

LABEL_KEYS = ("labels", "targets")


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: its name, dtype and per-sample shape (None for a dynamic dimension).

    ``batch`` is the model's batch dimension: None when dynamic, else the fixed size (e.g. 1)."""

    name: str
    dtype: str = "float32"
    shape: tuple = ()
    batch: int | None = None

    def describe(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in ((self.batch,) + tuple(self.shape)))
        return f"{self.name} {self.dtype} ({dims})"

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "batch": self.batch}


def _read_array_file(path: Path) -> dict[str, np.ndarray]:
    regular_file(path, "data file")
    try:
        if path.suffix == ".npy":
            return {"": np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as e:  # numpy raises ValueError, OSError, BadZipFile, ...: all mean "not readable"
        raise EdgesmithError(f"{path} is not a readable {path.suffix} file ({type(e).__name__}).",
                             "save arrays with numpy.save (.npy) or numpy.savez (.npz, one array per input).") from None


def read_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a .npy, a .npz or a folder of them ("" names the array of a .npy)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".npy", ".npz"))
        if not files:
            raise EdgesmithError(f"folder {p} holds no .npy or .npz files.", "put one file per batch of samples in it.")
        parts = [_read_array_file(f) for f in files]
        keys = set(parts[0])
        bad = next((f for f, d in zip(files, parts) if set(d) != keys), None)
        if bad is not None:
            raise EdgesmithError(f"{bad} holds arrays {sorted(_read_array_file(bad))} but {files[0]} holds "
                                 f"{sorted(keys)}.", "give every file of the folder the same array names.")
        out = {}
        for k in keys:
            try:
                out[k] = np.concatenate([d[k] for d in parts])
            except ValueError as e:
                raise EdgesmithError(f"the {k or 'arrays'} of the files in {p} cannot be stacked: {e}.",
                                     "give every file arrays of the same per-sample shape.") from None
        return out
    if not p.exists():
        raise EdgesmithError(f"data file {p} does not exist.", "check the path.")
    if p.suffix not in (".npy", ".npz"):
        raise EdgesmithError(f"{p} is not a .npy or .npz file.", "save arrays with numpy.save or numpy.savez.")
    return _read_array_file(p)


def check_array(name: str, x: np.ndarray, spec: TensorSpec | None, what: str) -> np.ndarray:
    """``x`` for input ``name``, refused with a message naming it when it cannot be that input."""
    x = np.asarray(x)
    label = f"{what} for input {name!r}" if name else what
    if x.dtype.kind in "OUSV" or x.dtype.kind == "c":
        raise EdgesmithError(f"{label} has dtype {x.dtype}; inputs must be real numbers.",
                             "convert it to the model's input dtype (float32 or an integer type).")
    if x.ndim == 0 or x.shape[0] == 0:
        raise EdgesmithError(f"{label} has shape {x.shape}: no samples.", "give a batch of at least one sample.")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        bad = int(x.size - np.count_nonzero(np.isfinite(x)))
        raise EdgesmithError(f"{label} contains {bad} NaN or infinite values.", "clean it; every value must be finite.")
    if spec is None:
        return x
    want = np.dtype(spec.dtype)
    if x.dtype.kind == "b" and want.kind != "b":
        raise EdgesmithError(f"{label} is bool but the model takes {want}.", f"give {name!r} as {want} data.")
    if want.kind in "iu" and x.dtype.kind == "f":
        raise EdgesmithError(f"{label} is {x.dtype} but the model takes {want} (e.g. token ids).",
                             f"give {name!r} as integer data.")
    if want.kind == "f" and x.dtype.kind in "iu":  # never a silent cast: ids given to a float input are a mistake
        raise EdgesmithError(f"{label} is {x.dtype} but the model takes {want}.",
                             f"convert it first (array.astype(np.{want.name})) if that is what you mean.")
    if x.ndim != len(spec.shape) + 1:
        raise EdgesmithError(f"{label} has shape {x.shape} but the model takes {spec.describe()}.",
                             f"give (samples, {', '.join('?' if d is None else str(d) for d in spec.shape)}) arrays.")
    bad = [i for i, d in enumerate(spec.shape) if d is not None and x.shape[i + 1] != d]
    if bad:
        raise EdgesmithError(f"{label} has shape {x.shape} but the model takes {spec.describe()}.",
                             f"reshape {name!r} (dimension {bad[0] + 1} should be {spec.shape[bad[0]]}).")
    if want.kind in "iu" and x.size:
        info = np.iinfo(want)
        if x.min() < info.min or x.max() > info.max:
            raise EdgesmithError(f"{label} holds values outside {want}.", f"give {name!r} values in [{info.min}, {info.max}].")
    return np.ascontiguousarray(x.astype(want) if want.kind == "f" or x.dtype != want else x)


@dataclass
class TensorData:
    """Named input arrays (same number of samples each) and optional labels/targets."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None = None
    origin: str | None = None  # what the arrays are when they are not the user's files (reports say it)

    def __len__(self) -> int:
        return int(len(next(iter(self.inputs.values()))))

    def take(self, idx) -> dict[str, np.ndarray]:
        return {k: np.ascontiguousarray(v[idx]) for k, v in self.inputs.items()}


def load_tensors(path: str | Path, specs: list[TensorSpec], what: str, labels_path: str | Path | None = None,
                 pinned=()) -> TensorData:
    """Arrays for every input in ``specs`` from ``path`` (.npy / .npz / folder), checked; labels from the
    ``labels``/``targets`` array of the .npz or from ``labels_path``. ``pinned``: inputs the model holds as constants,
    whose 0-d arrays in the file gave their values and are not samples."""
    arrays = {k: v for k, v in read_arrays(path).items() if not (k in pinned and np.ndim(v) == 0)}
    labels = None
    for k in LABEL_KEYS:
        if k in arrays and k not in {s.name for s in specs}:
            labels = arrays.pop(k)
    if "" in arrays:  # a .npy: the model's only input
        if len(specs) != 1:
            raise EdgesmithError(f"{path} holds one array but the model takes {len(specs)} inputs "
                                 f"({', '.join(s.name for s in specs)}).",
                                 "save an .npz with one array per input name (numpy.savez(f, name=array, ...)).")
        arrays = {specs[0].name: arrays.pop("")}
    names = [s.name for s in specs]
    missing = [n for n in names if n not in arrays]
    extra = [k for k in arrays if k not in names]
    if missing or extra:
        raise EdgesmithError(f"{path} holds arrays {sorted(arrays)} but the model takes inputs {names}"
                             + (f" (missing {', '.join(missing)})" if missing else "") + ".",
                             "name the arrays after the model's inputs (plus labels or targets if any).")
    checked = {s.name: check_array(s.name, arrays[s.name], s, what) for s in specs}
    counts = {k: len(v) for k, v in checked.items()}
    if len(set(counts.values())) > 1:
        raise EdgesmithError(f"the inputs of {path} have different sample counts {counts}.",
                             "give the same number of samples for every input.")
    if labels_path is not None:
        arr = read_arrays(labels_path)
        if len(arr) != 1:
            raise EdgesmithError(f"{labels_path} holds {len(arr)} arrays; labels are one array.",
                                 "save the labels alone with numpy.save.")
        labels = next(iter(arr.values()))
    if labels is not None:
        labels = check_array("", labels, None, "labels")
        n = len(next(iter(checked.values())))
        if len(labels) != n:
            raise EdgesmithError(f"there are {len(labels)} labels for {n} samples.", "give one label per sample.")
    return TensorData(checked, labels)


def read_text(path: str | Path) -> str:
    """UTF-8 text of a file, or of every .txt file in a folder (sorted, joined by newlines)."""
    p = Path(path)
    files = sorted(p.glob("*.txt")) if p.is_dir() else [p]
    if not p.exists():
        raise EdgesmithError(f"text file {p} does not exist.", "check the path.")
    if not files:
        raise EdgesmithError(f"folder {p} holds no .txt files.", "put UTF-8 .txt files in it.")
    parts = []
    for f in files:
        regular_file(f, "text file")
        try:
            parts.append(f.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise EdgesmithError(f"{f} is not UTF-8 text (byte {e.start}).", "save the text as UTF-8.") from None
    text = "\n".join(parts)
    if not text.strip():
        raise EdgesmithError(f"{p} holds no text.", "give a file with some text in it.")
    return text


def token_windows(tokens: np.ndarray, length: int, n: int | None = None, seed: int | None = None, *,
                  source: str = "the text", option: str = "seq_len") -> np.ndarray:
    """Windows of ``length`` tokens: consecutive from the start (``seed`` None) or at seeded random starts.
    ``source`` and ``option`` (the model option that sets the window) name them in the error for too little text."""
    tokens = np.asarray(tokens, np.int64)
    if len(tokens) < length:
        raise EdgesmithError(f"{source} gives {len(tokens)} tokens, fewer than one window of {length}.",
                             f"give more text, or a shorter window (--model-option {option}=...).")
    if seed is None:
        count = len(tokens) // length if n is None else min(n, len(tokens) // length)
        return tokens[: count * length].reshape(count, length)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(tokens) - length + 1, size=n or max(1, len(tokens) // length))
    return np.stack([tokens[s:s + length] for s in starts])
