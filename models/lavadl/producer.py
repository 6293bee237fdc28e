"""``lavadl-digits``: a Sigma-Delta classifier trained with lava-dl's SLAYER and exported by lava-dl itself.

The model is not made by edgesmith's own conversion: ``train_worker.py`` runs in the Lava env (lava-dl
0.6, torch 2.3), trains ``slayer.block.sigma_delta`` blocks (Input -> Dense 128 -> Dense 64 -> Output,
the same widths as ``digits-mlp``) on the same digits split, and writes the network with lava-dl's
``export_hdf5``. The producer hands that netx file to the pipeline as it is (``native_format`` netx), so
deploying it exercises the path a lava-dl user takes: their file, read by netx in Lava, checked against
edgesmith's bit-exact reference, with activity counts and estimates. Its float outputs (SLAYER's own
quantization-aware forward pass) are kept for comparison (``slayer_test_logits``).

Options: ``hidden`` widths, ``threshold`` (the Sigma-Delta threshold in activation units, lava-dl's
``vThMant = threshold * 64``), ``epochs``, ``lr``, ``steps`` (time steps each sample is held for in
training). Training is deterministic for the seed (one thread) and cached by its settings.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError, atomic_files, cache_dir, run_in_lava_env, scratch_dir
from edgesmith.models.base import Evaluation, Metric, Producer, register_producer
from edgesmith.models.digits import _load_digits_split

WORKER = Path(__file__).resolve().parent / "train_worker.py"
VERSION = 1  # bump when the training recipe changes (the cache key)


@register_producer
class LavaDlDigits(Producer):
    name = "lavadl-digits"
    description = "Sigma-Delta MLP on 8x8 digits trained with lava-dl SLAYER and exported by lava-dl (netx HDF5)"
    metric = Metric("accuracy", higher_is_better=True, unit="fraction")
    native_format = "netx"
    tiny_options = {"hidden": (16,), "epochs": 2}

    def __init__(self, seed: int = 0, hidden: tuple[int, ...] = (128, 64), threshold: float = 0.1, epochs: int = 30,
                 lr: float = 3e-3, steps: int = 4):
        super().__init__(seed=seed)
        self.hidden, self.threshold, self.epochs, self.lr, self.steps = hidden, threshold, epochs, lr, steps

    def _check(self) -> None:
        if isinstance(self.hidden, int):  # --model-option hidden=16 parses as one width
            self.hidden = (self.hidden,)
        hidden = tuple(self.hidden)
        if not hidden or any(not isinstance(h, int) or h < 1 for h in hidden):
            raise EdgesmithError(f"lavadl-digits: hidden {self.hidden!r} is not a list of positive widths.",
                                 "use e.g. --model-option hidden=128,64.")
        if not 0 <= float(self.threshold) < 32:
            raise EdgesmithError(f"lavadl-digits: threshold {self.threshold} is outside 0..32.",
                                 "use a threshold in activation units, e.g. 0.1 (vThMant 6).")
        if int(self.epochs) < 1 or int(self.steps) < 1 or not float(self.lr) > 0:
            raise EdgesmithError("lavadl-digits: epochs and steps must be >= 1 and lr > 0.", "check the options.")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (64,)

    def _split(self):
        if not hasattr(self, "split_"):
            self.split_ = _load_digits_split(self.seed)
        return self.split_

    def _config(self) -> dict:
        return {"hidden": list(self.hidden), "threshold": float(self.threshold), "epochs": int(self.epochs),
                "lr": float(self.lr), "batch": 64, "steps": int(self.steps), "seed": int(self.seed)}

    def _folder(self) -> Path:
        key = json.dumps({**self._config(), "version": VERSION}, sort_keys=True)
        return cache_dir() / "models" / f"lavadl-digits-{hashlib.sha256(key.encode()).hexdigest()[:16]}"

    def build(self) -> "LavaDlDigits":
        """Train in the Lava env (or reuse the cached network and logits for the same settings)."""
        self._check()
        folder = self._folder()
        net, logits = folder / "network.net", folder / "train.npz"
        if not (net.exists() and logits.exists()):
            self._train(folder)
        with np.load(logits, allow_pickle=False) as z:
            self.slayer_test_logits_ = z["test_logits"]
            self.training_ = json.loads(str(z["info_json"]))
        self.path, self.module_ = net, None
        return self

    def _train(self, folder: Path) -> None:
        x_tr, x_te, y_tr, _ = self._split()
        with scratch_dir("lavadl") as tmp:
            src = Path(tmp) / "in.npz"
            np.savez(src, x_train=x_tr, y_train=y_tr, x_test=x_te, config_json=np.array(json.dumps(self._config())))
            run_in_lava_env(WORKER, [str(src), str(tmp)], timeout_s=1800, cwd=tmp, what="lava-dl training",
                            too_long_fix="train fewer epochs (--model-option epochs=...).",
                            failed_fix="check that .venv-lava has lava-dl 0.6 (run `make setup`).",
                            expect=Path(tmp) / "network.net")
            names = ["network.net", "train.npz"]
            with atomic_files([folder / n for n in names], force=True) as tmps:
                for name, t in zip(names, tmps):
                    t.write_bytes((Path(tmp) / name).read_bytes())

    def calibration_data(self, n: int = 128) -> np.ndarray:
        x_tr = self._split()[0]
        idx = np.random.default_rng(self.seed).permutation(len(x_tr))[: min(n, len(x_tr))]
        return np.ascontiguousarray(x_tr[np.sort(idx)])

    def test_data(self) -> tuple[np.ndarray, np.ndarray]:
        _, x_te, _, y_te = self._split()
        return x_te, y_te

    def evaluate(self, predict) -> Evaluation:
        x_te, y_te = self.test_data()
        logits = np.asarray(predict(x_te))
        return Evaluation(self.metric, float(np.mean(np.argmax(logits, axis=-1) == y_te)), len(y_te))

    def report_notes(self) -> list[str]:
        if not hasattr(self, "slayer_test_logits_"):
            return []
        acc = float(np.mean(self.slayer_test_logits_.argmax(1) == self.test_data()[1]))
        return [f"trained with lava-dl {self.training_.get('lava_dl')} SLAYER (torch {self.training_.get('torch')}) for "
                f"{self.epochs} epochs; SLAYER's own quantization-aware float accuracy on the test split: {acc:.4f}"]
