"""A user's own model with the user's own data: the producer behind every model source.

A model source (``bench/sources``: an ONNX file, a torch factory, a TorchScript or ``torch.export``
file, an official RWKV checkpoint, a saved tree ensemble, ...) loads the model and its declared inputs;
``UserModel`` then gives the pipeline what any producer gives: calibration samples (the user's
``--calibration-data``), example inputs, and an evaluation on the user's ``--eval-data`` with the
chosen metric (``models.metrics``; fidelity to the fp32 model when there are no labels).

Data are cut into batches the model accepts: a model exported with a fixed batch (say 1) is fed one
sample at a time, never a batch of 64.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from edgesmith.common import EdgesmithError, Feeds, NoEvaluationData, sample_slice
from edgesmith.models.base import Evaluation, Metric, Producer, SplitEvaluation, split_indices
from edgesmith.models.metrics import get_metric
from edgesmith.models.user_data import TensorData, TensorSpec

EVAL_BATCH = 64  # samples per call when the model's batch is dynamic


class UserModel(Producer):
    """Built by a model source; ``__init__`` stores what the source found, ``build`` loads nothing more.

    ``module`` (torch module, tree ensemble) or ``path`` (an ONNX file) is the model in ``native_format``;
    ``reference`` runs the fp32 model on a batch (what fidelity compares against); ``recurrent`` is the
    state description of a step graph (``runtimes.stateful``), or None.
    """

    name = "user-model"
    description = "a user's model"
    metric = Metric("fidelity")

    def __init__(self, *, label: str, kind: str, native_format: str, inputs: list[TensorSpec],
                 module=None, path=None, calibration: TensorData | None = None, evaluation: TensorData | None = None,
                 metric: str | None = None, reference: Callable | None = None, recurrent: dict | None = None,
                 frame_seconds: float | None = None, vocab_size: int | None = None, eval_windows=None,
                 step_calibration: dict | None = None, notes: tuple[str, ...] = (), unsupported: dict | None = None,
                 int4_layers: dict | None = None, seed: int = 0, given_precision: str | None = None):
        super().__init__(seed=seed)
        self.name, self.kind, self.native_format = label, kind, native_format
        self.description = f"{kind} model from {label}"
        self.inputs, self.module_, self.path = list(inputs), module, path
        self.calibration, self.evaluation, self.reference = calibration, evaluation, reference
        self.recurrent, self.notes, self.unsupported = recurrent, list(notes), dict(unsupported or {})
        self.eval_windows_ = eval_windows
        self.int4_layers = int4_layers  # {"matmul": n, "gemm": m}: what MatMulNBits can take, Gemms once rewritten
        self.step_calibration = step_calibration  # a step graph's calibration: per-step inputs with real states
        self.given_precision = given_precision  # "int8"/"int4" for a file that arrives quantized, else None
        if frame_seconds is not None:
            self.frame_seconds = float(frame_seconds)
        if vocab_size is not None:
            self.vocab_size = int(vocab_size)
        self.metric_spec = self._choose_metric(metric)
        self.metric = Metric(self.metric_spec.name, self.metric_spec.higher_is_better, self.metric_spec.unit)

    def _choose_metric(self, name: str | None):
        if self.kind == "token-lm":
            if name not in (None, "perplexity"):
                raise EdgesmithError(f"token-lm models are scored by perplexity, not {name!r}.",
                                     "drop --metric or use --metric perplexity.")
            return get_metric("perplexity")
        labels = None if self.evaluation is None else self.evaluation.labels
        if name is None:
            name = "fidelity" if labels is None else ("accuracy" if labels.ndim == 1 and labels.dtype.kind in "iu"
                                                       else "mse")
        spec = get_metric(name)
        if spec.needs in ("labels", "targets") and labels is None:
            raise EdgesmithError(f"metric {spec.name} needs labels but none were given.",
                                 "pass --labels FILE.npy or a labels array in the --eval-data .npz; or use --metric "
                                 "fidelity.")
        return spec

    # --- Producer -----------------------------------------------------------------------------------
    def build(self) -> "UserModel":
        return self

    @property
    def module(self):
        return self.module_

    @property
    def input_shape(self) -> tuple:
        return tuple(self.inputs[0].shape) if self.inputs else ()

    @property
    def fixed_batch(self) -> int | None:
        return self.inputs[0].batch if self.inputs else None

    def _data(self, which: TensorData | None) -> TensorData:
        data = which or self.calibration or self.evaluation
        if data is None:
            forms = ("UTF-8 text or a folder of .txt files" if self.kind == "token-lm" else
                     ".npy, .npz or a folder; or --input-shape [NAME=]D,...[:TYPE] to be scored on synthetic inputs")
            raise NoEvaluationData(f"{self.name} has no data to run on.",
                                   f"pass --calibration-data and/or --eval-data ({forms}).")
        return data

    def _as_feed(self, d: dict):
        return d if len(d) > 1 else next(iter(d.values()))

    def calibration_data(self, n: int = 128):
        if self.kind == "token-lm":
            return None if self.calibration is None else self.calibration.inputs["tokens"][:n]
        if self.calibration is None:
            return None
        if self.step_calibration is not None:  # a state's samples lie on its batch axis
            return sample_slice(Feeds(self.step_calibration, (self.recurrent or {}).get("state_batch_axes")), 0, n)
        return self._as_feed(self.calibration.take(slice(0, n)))

    def example_inputs(self, batch: int = 1):
        data = self._data(self.calibration)
        idx = np.arange(batch) % len(data)
        return self._as_feed(data.take(idx))

    def training_data(self):
        return None

    def unsupported_formats(self) -> dict[str, str]:
        out = dict(self.unsupported)
        if self.calibration is None and self.kind == "tensor":
            out.setdefault("int8", "no calibration data was given (static int8 needs it): pass --calibration-data")
        return out

    def unsupported_runtimes(self) -> dict[str, str]:
        if len(self.inputs) > 1 or self.recurrent:
            return {"tvm": "the TVM runtime feeds one input tensor per call; this model takes "
                           + ("its state as extra inputs" if self.recurrent else f"{len(self.inputs)} inputs")}
        if self.given_precision:
            return {"tvm": f"the model arrives {self.given_precision}-quantized, and edgesmith runs such files in "
                           "onnxruntime only (TVM's importer lacks onnxruntime's integer operators)"}
        return {}

    def report_notes(self) -> list[str]:
        return list(self.notes)

    def batches(self, data: TensorData):
        """(slice, feed) over ``data`` in batches the model accepts."""
        step = self.fixed_batch or EVAL_BATCH
        n = len(data)
        if self.fixed_batch and n % step:
            raise EdgesmithError(f"{n} samples do not split into batches of {step}, the model's fixed batch.",
                                 f"give a multiple of {step} samples.")
        for i in range(0, n, step):
            yield slice(i, min(i + step, n)), self._as_feed(data.take(slice(i, min(i + step, n))))

    def run_batches(self, predict, data: TensorData) -> np.ndarray:
        return np.concatenate([np.asarray(predict(feed)) for _, feed in self.batches(data)])

    def reference_outputs(self) -> np.ndarray:
        if not hasattr(self, "reference_outputs_"):
            if self.reference is None:
                raise EdgesmithError("fidelity needs the fp32 model's outputs but no reference was given.",
                                     "use a model source that keeps the fp32 model.")
            self.reference_outputs_ = self.run_batches(self.reference, self._data(self.evaluation))
        return self.reference_outputs_

    def evaluate(self, predict) -> Evaluation:
        if self.kind == "token-lm":  # next-token NLL a few windows at a time: logits of a large vocabulary are big
            from edgesmith.models.metrics import token_nll

            windows = self.eval_windows()
            nll = [token_nll(np.asarray(predict(windows[i:i + 4, :-1])), windows[i:i + 4, 1:])
                   for i in range(0, len(windows), 4)]
            nll = np.concatenate(nll)
            extra = {"tokens": int(nll.size), "nll_per_token": float(nll.mean())}
            return Evaluation(self.metric, float(np.exp(nll.mean())), int(nll.size), extra)
        data = self._data(self.evaluation)
        outputs = self.run_batches(predict, data)
        spec = self.metric_spec
        target = self.reference_outputs() if spec.needs == "reference" else data.labels
        value, extra = spec.fn(outputs, target)
        extra = {**extra, "eval_samples": len(data), "data": data.origin or (
            "user evaluation data" if self.evaluation is not None else "user calibration data (no --eval-data given)")}
        return Evaluation(self.metric, value, len(data), extra)

    def evaluate_split(self, predict, fraction: float, seed: int) -> SplitEvaluation | None:
        if self.kind == "token-lm":  # perplexity per part: the windows split, each window's token NLLs kept
            from edgesmith.models.metrics import token_nll

            windows = self.eval_windows()
            parts = split_indices(len(windows), fraction, seed)
            if parts is None:
                return None
            nll = np.concatenate([token_nll(np.asarray(predict(windows[i:i + 4, :-1])), windows[i:i + 4, 1:])
                                  for i in range(0, len(windows), 4)])  # (windows, positions)

            def score(idx):
                part = nll[idx]
                return Evaluation(self.metric, float(np.exp(part.mean())), int(part.size),
                                  {"tokens": int(part.size), "nll_per_token": float(part.mean())})

            return SplitEvaluation(*(score(i) for i in (slice(None), *parts)))
        data = self._data(self.evaluation)
        parts = split_indices(len(data), fraction, seed)
        if parts is None:
            return None
        outputs = self.run_batches(predict, data)
        spec = self.metric_spec
        target = self.reference_outputs() if spec.needs == "reference" else data.labels
        origin = data.origin or ("user evaluation data" if self.evaluation is not None else
                                 "user calibration data (no --eval-data given)")

        def score(idx, part: str):
            value, extra = spec.fn(outputs[idx], None if target is None else target[idx])
            n = len(outputs[idx])
            return Evaluation(self.metric, value, n, {**extra, "eval_samples": n, "data": f"{origin}{part}"})

        return SplitEvaluation(score(slice(None), ""), score(parts[0], ", validation part"),
                               score(parts[1], ", held-out part"))

    def eval_windows(self) -> np.ndarray:
        if self.eval_windows_ is None:
            raise NoEvaluationData(f"{self.name} needs evaluation text to score perplexity.",
                                 "pass --eval-data FILE.txt (UTF-8) or a folder of .txt files.")
        return self.eval_windows_
