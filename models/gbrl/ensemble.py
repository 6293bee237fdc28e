"""``GBTEnsemble``: a multi-output gradient-boosted tree ensemble grown one tree per RL update.

    ens = GBTEnsemble(input_dim=4, output_dim=3, lr=[0.05, 0.05, 0.01])
    ens.fit_step(X, grads)          # one tree fitted to the loss gradients w.r.t. the outputs
    y = ens.predict(X)              # bias - lr * (sum of the trees' leaf values), per output

Each tree stores the mean gradient of the samples in a leaf; the learning rate is applied at
prediction time (GBRL's SGD over output ranges), so different outputs (policy logits, value) can
learn at different rates and ``predict(X, lr=...)`` can re-weight without refitting. Split
candidates are the quantiles of each batch (see ``binning``); trees are complete binary trees in
heap order (see ``tree``). Deterministic: the same batches give bit-identical ensembles.
"""
from __future__ import annotations

import json
from pathlib import Path

import numba
import numpy as np

from edgesmith.common import EdgesmithError, atomic_path, check_finite_array
from edgesmith.models.gbrl import binning, tree

SPLIT_SCORES = ("cosine", "l2")
GROW_POLICIES = ("greedy", "oblivious")
_FORMAT_VERSION = 1
ENSEMBLE_ARRAYS = ("meta", "features", "thresholds", "leaves")  # what GBTEnsemble.save writes
_SERIAL_BELOW = 32  # rows; smaller batches skip the thread pool (batch-1 latency)
_PARALLEL_FIT_ROWS = 16384  # rows; smaller batches are fitted on one thread (threads lost below this on 2 shared cores)


class GBTEnsemble:
    """Trees ``(feature, threshold)`` per heap node plus ``(2^depth, output_dim)`` leaves each."""

    def __init__(self, input_dim: int, output_dim: int, *, max_depth: int = 4, n_bins: int = 256,
                 split_score: str = "cosine", grow_policy: str = "greedy", min_data_in_leaf: int = 0,
                 lr: float | list[float] | np.ndarray = 0.05, bias: list[float] | np.ndarray | None = None):
        if int(input_dim) < 1 or int(output_dim) < 1:
            raise EdgesmithError(f"input_dim {input_dim} and output_dim {output_dim} must both be >= 1.",
                                 "pass the observation size and the number of outputs.")
        if not 1 <= int(max_depth) <= 8:  # histogram workspace grows as 2^depth
            raise EdgesmithError(f"max_depth {max_depth} is out of range.", "use a depth between 1 and 8 (4 is usual).")
        if not 2 <= int(n_bins) <= binning.MAX_BINS:
            raise EdgesmithError(f"n_bins {n_bins} is out of range.", f"use 2..{binning.MAX_BINS} bins (uint8 bins).")
        if split_score not in SPLIT_SCORES:
            raise EdgesmithError(f"unknown split_score {split_score!r}.", f"use one of {SPLIT_SCORES}.")
        if grow_policy not in GROW_POLICIES:
            raise EdgesmithError(f"unknown grow_policy {grow_policy!r}.", f"use one of {GROW_POLICIES}.")
        if int(min_data_in_leaf) < 0:
            raise EdgesmithError(f"min_data_in_leaf {min_data_in_leaf} is negative.", "use 0 or more.")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.max_depth, self.n_bins = int(max_depth), int(n_bins)
        self.split_score, self.grow_policy = split_score, grow_policy
        self.min_data_in_leaf = int(min_data_in_leaf)
        self.lr = self._per_output(lr, "lr")
        self.bias = np.zeros(self.output_dim, np.float32) if bias is None else self._per_output(bias, "bias")
        n_split, n_leaf = (1 << self.max_depth) - 1, 1 << self.max_depth
        self.n_trees = 0
        self._feat = np.zeros((0, n_split), np.int32)
        self._thr = np.zeros((0, n_split), np.float32)
        self._leaves = np.zeros((0, n_leaf, self.output_dim), np.float32)
        self._ws: np.ndarray | None = None

    # --- construction helpers --------------------------------------------------------------------
    def _per_output(self, v, what: str) -> np.ndarray:
        a = np.asarray(v, dtype=np.float32).reshape(-1)
        if a.size == 1:
            a = np.full(self.output_dim, a[0], np.float32)
        if a.size != self.output_dim or not np.all(np.isfinite(a)):
            raise EdgesmithError(f"{what} has {a.size} finite-or-not values for {self.output_dim} outputs.",
                                 f"give one {what} or one per output, all finite.")
        return a

    @property
    def oblivious(self) -> bool:
        return self.grow_policy == "oblivious"

    def params(self) -> dict:
        """Constructor arguments (JSON-ready): ``GBTEnsemble(**ens.params())`` is an empty twin."""
        return {"input_dim": self.input_dim, "output_dim": self.output_dim, "max_depth": self.max_depth,
                "n_bins": self.n_bins, "split_score": self.split_score, "grow_policy": self.grow_policy,
                "min_data_in_leaf": self.min_data_in_leaf, "lr": self.lr.tolist(), "bias": self.bias.tolist()}

    def set_bias(self, bias) -> "GBTEnsemble":
        self.bias = self._per_output(bias, "bias")
        return self

    # --- arrays (views of the first n_trees) ---------------------------------------------------------
    @property
    def features(self) -> np.ndarray:
        return self._feat[: self.n_trees]

    @property
    def thresholds(self) -> np.ndarray:
        return self._thr[: self.n_trees]

    @property
    def leaves(self) -> np.ndarray:
        return self._leaves[: self.n_trees]

    def _grow_capacity(self) -> None:
        cap = max(64, 2 * len(self._feat))
        for name in ("_feat", "_thr", "_leaves"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], old.dtype)
            new[: self.n_trees] = old[: self.n_trees]
            setattr(self, name, new)

    # --- fitting ------------------------------------------------------------------------------------
    def _check_x(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32)
        if X.ndim == 1:
            X = X[None, :]
        if X.ndim != 2 or X.shape[1] != self.input_dim:
            raise EdgesmithError(f"inputs have shape {X.shape} but the ensemble takes (batch, {self.input_dim}).",
                                 "pass a 2-D array with one row per sample.")
        return np.ascontiguousarray(X)

    def fit_step(self, X, grads) -> "GBTEnsemble":
        """Fit one tree to ``grads`` (n x output_dim: dLoss/dOutput per sample) and append it."""
        X = check_finite_array(self._check_x(X), "X")
        g = check_finite_array(np.asarray(grads, dtype=np.float32), "grads")
        if g.ndim == 1 and self.output_dim == 1:
            g = g[:, None]
        if g.shape != (X.shape[0], self.output_dim):
            raise EdgesmithError(f"grads have shape {g.shape} but X has {X.shape[0]} rows and the ensemble "
                                 f"{self.output_dim} outputs.", "pass one gradient row per input row.")
        # like GBRL's par_th: below a size where threads pay off, fit on one thread
        threads = numba.get_num_threads()
        if X.shape[0] < _PARALLEL_FIT_ROWS:
            numba.set_num_threads(1)
        try:
            return self._fit_step(X, g)
        finally:
            numba.set_num_threads(threads)

    def _fit_step(self, X: np.ndarray, g: np.ndarray) -> "GBTEnsemble":
        thr, n_thr, xb = binning.quantile_bins(X, self.n_bins)
        G = g.astype(np.float64)
        if self.split_score == "l2":
            # GBRL centres each output and divides by its sample std so no output dominates the split
            G = G - G.mean(axis=0)
            std = G.std(axis=0, ddof=1) if len(G) > 1 else np.ones(self.output_dim)
            G = G / np.where(std > 0, std, 1.0)
        if self._ws is None:  # histogram buffers, kept for the next tree (not part of the model)
            self._ws = tree.workspace(self.max_depth, self.input_dim, self.n_bins, self.output_dim)
        feat, sbin, leaves = tree.fit_tree(xb, n_thr, np.ascontiguousarray(G), np.ascontiguousarray(g),
                                           self.max_depth, tree.L2 if self.split_score == "l2" else tree.COSINE,
                                           self.min_data_in_leaf, self.oblivious, self._ws)
        t = np.where(sbin >= 0, thr[feat, np.maximum(sbin, 0)], np.float32(np.inf)).astype(np.float32)
        if self.n_trees == len(self._feat):
            self._grow_capacity()
        i = self.n_trees
        self._feat[i], self._thr[i], self._leaves[i] = np.where(sbin >= 0, feat, 0), t, leaves
        self.n_trees += 1
        return self

    # --- prediction ---------------------------------------------------------------------------------
    def leaf_sums(self, X, start: int = 0, stop: int | None = None, threads: str = "auto") -> np.ndarray:
        """Sum of the leaf values of trees ``[start, stop)`` for each row, float64 ``(n, output_dim)``."""
        X = self._check_x(X)
        stop = self.n_trees if stop is None else min(int(stop), self.n_trees)
        serial = threads == "serial" or (threads == "auto" and len(X) < _SERIAL_BELOW)
        fn = tree.leaf_sums_serial if serial else tree.leaf_sums_parallel
        return fn(X, self._feat, self._thr, self._leaves, self.max_depth, self.oblivious, int(start), int(stop))

    def predict(self, X, lr=None, n_trees: int | None = None) -> np.ndarray:
        """``bias - lr * sum_trees leaf`` (float32 ``(n, output_dim)``); ``lr`` overrides the stored rates."""
        rate = self.lr if lr is None else self._per_output(lr, "lr")
        s = self.leaf_sums(X, 0, n_trees)
        return (self.bias.astype(np.float64) - rate.astype(np.float64) * s).astype(np.float32)

    def tree(self, i: int) -> dict:
        """One tree as plain arrays: heap-order ``feature``/``threshold`` and ``leaves``."""
        return {"feature": self.features[i].copy(), "threshold": self.thresholds[i].copy(),
                "leaves": self.leaves[i].copy()}

    def truncated(self, n_trees: int) -> "GBTEnsemble":
        """A copy holding the first ``n_trees`` trees (for benchmarks and exports of a prefix)."""
        out = GBTEnsemble(**self.params())
        n = min(int(n_trees), self.n_trees)
        out._feat, out._thr, out._leaves = self.features[:n].copy(), self.thresholds[:n].copy(), self.leaves[:n].copy()
        out.n_trees = n
        return out

    def select_outputs(self, idx) -> "GBTEnsemble":
        """A copy predicting only outputs ``idx`` (e.g. the policy logits of a shared actor-critic)."""
        idx = np.atleast_1d(np.asarray(idx, dtype=np.int64))
        if idx.size == 0 or idx.min() < 0 or idx.max() >= self.output_dim:
            raise EdgesmithError(f"output indices {idx.tolist()} are out of range for {self.output_dim} outputs.",
                                 f"pick indices in 0..{self.output_dim - 1}.")
        p = {**self.params(), "output_dim": int(idx.size), "lr": self.lr[idx].tolist(), "bias": self.bias[idx].tolist()}
        out = GBTEnsemble(**p)
        out._feat, out._thr = self.features.copy(), self.thresholds.copy()
        out._leaves = np.ascontiguousarray(self.leaves[:, :, idx])
        out.n_trees = self.n_trees
        return out

    # --- persistence -------------------------------------------------------------------------------
    def size_bytes(self) -> int:
        """Bytes of the model arrays (features int32, thresholds and leaves float32, bias and lr)."""
        return int(self.features.nbytes + self.thresholds.nbytes + self.leaves.nbytes
                   + self.bias.nbytes + self.lr.nbytes)

    def save(self, path, *, force: bool = False) -> Path:
        """Write an ``.npz`` atomically; ``load`` gives back bit-identical predictions."""
        path = Path(path)
        if path.suffix != ".npz":
            raise EdgesmithError(f"{path} does not end in .npz.", "name the ensemble file *.npz.")
        meta = json.dumps({"format_version": _FORMAT_VERSION, **self.params()})
        with atomic_path(path, force=force) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, meta=np.array(meta), features=self.features, thresholds=self.thresholds,
                         leaves=self.leaves)
        return path

    @classmethod
    def load(cls, path) -> "GBTEnsemble":
        path = Path(path)
        if not path.exists():
            raise EdgesmithError(f"ensemble file {path} does not exist.", "check the path or train and save one.")
        fix = "pass a file written by GBTEnsemble.save as the model; data goes in --calibration-data / --eval-data."
        try:
            z = np.load(path, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):  # an .npy array under an .npz name
                raise EdgesmithError(f"{path} is not a saved tree ensemble: it is one array, not an .npz archive.", fix)
            with z:
                held = list(z.files)
                if any(k not in held for k in ENSEMBLE_ARRAYS):
                    raise EdgesmithError(f"{path} is not a saved tree ensemble: it holds {', '.join(held) or 'no arrays'}"
                                         f", not {', '.join(ENSEMBLE_ARRAYS)}.", fix)
                meta = json.loads(str(z["meta"]))
                feat, thr, leaves = z["features"], z["thresholds"], z["leaves"]
        except EdgesmithError:
            raise
        except Exception as e:  # np.load on an empty, cut-off or damaged file: OSError, BadZipFile, TokenError...
            raise EdgesmithError(f"{path} is not a GBTEnsemble file ({type(e).__name__}).",
                                 "re-save the ensemble with GBTEnsemble.save.") from None
        if not isinstance(meta, dict) or meta.pop("format_version", None) != _FORMAT_VERSION:
            raise EdgesmithError(f"{path} has an unknown format version.", "re-save it with this edgesmith version.")
        try:
            ens = cls(**meta)
        except (TypeError, ValueError) as e:  # a damaged meta: keys the constructor does not take, values not numbers
            raise EdgesmithError(f"{path} has damaged ensemble parameters ({type(e).__name__}: {e}).",
                                 "re-save the ensemble with GBTEnsemble.save.") from None
        ens._feat, ens._thr, ens._leaves = _checked_arrays(path, ens, feat, thr, leaves)
        ens.n_trees = len(ens._feat)
        return ens

    def __repr__(self) -> str:
        return (f"GBTEnsemble({self.n_trees} trees, {self.input_dim}->{self.output_dim}, depth {self.max_depth}, "
                f"{self.grow_policy}, {self.split_score})")


def _checked_arrays(path: Path, ens: "GBTEnsemble", feat, thr, leaves):
    """The loaded arrays as the engine's kernels take them, once their shapes match the parameters and every feature
    index lies inside the input: the Numba kernels index without bounds checks, so a damaged file would read (or
    crash on) memory outside the observation."""
    n_split, n_leaf = (1 << ens.max_depth) - 1, 1 << ens.max_depth
    bad = None
    if not all(isinstance(a, np.ndarray) for a in (feat, thr, leaves)):  # numpy hands back bytes for a damaged member
        bad = "members that are not .npy arrays"
    elif any(a.dtype.kind not in "iuf" for a in (feat, thr, leaves)):
        bad = "arrays that are not numbers"
    elif feat.ndim != 2 or feat.shape[1] != n_split or thr.shape != feat.shape:
        bad = f"features {feat.shape} and thresholds {thr.shape}, not (trees, {n_split}) each for depth {ens.max_depth}"
    elif leaves.shape != (len(feat), n_leaf, ens.output_dim):
        bad = f"leaves {leaves.shape}, not ({len(feat)}, {n_leaf}, {ens.output_dim})"
    elif feat.dtype.kind == "f" or (feat.size and (feat.min() < 0 or feat.max() >= ens.input_dim)):
        bad = f"feature indices outside 0..{ens.input_dim - 1}"
    elif np.isnan(thr).any() or not np.isfinite(leaves).all():
        bad = "NaN thresholds or non-finite leaf values"
    if bad:
        raise EdgesmithError(f"{path} is a damaged tree ensemble: it holds {bad}.",
                             "re-save the ensemble with GBTEnsemble.save.")
    return (np.ascontiguousarray(feat, np.int32), np.ascontiguousarray(thr, np.float32),
            np.ascontiguousarray(leaves, np.float32))
