"""The producer contract: every model source in edgesmith is a ``Producer``.

A producer builds (usually trains, here and quickly) a small model and gives what the rest of the
pipeline needs to compress, export and judge it: calibration data (drawn from training data only),
example inputs of the right shape, and an evaluation metric computed from a prediction function, so
the same metric can score fp32 torch, an int8 ONNX model or a Lava simulation alike.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.common.registry import Registry

PredictFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Metric:
    """How a producer's evaluation is read: its name and whether larger is better."""

    name: str
    higher_is_better: bool = True
    unit: str = ""


@dataclass
class Evaluation:
    """One evaluation of one model: the headline metric and any extra figures."""

    metric: Metric
    value: float
    n_samples: int
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "metric": self.metric.name,
            "value": float(self.value),
            "higher_is_better": self.metric.higher_is_better,
            "unit": self.metric.unit,
            "n_samples": int(self.n_samples),
            **({"extra": self.extra} if self.extra else {}),
        }


@dataclass
class SplitEvaluation:
    """``Producer.evaluate_split``'s answer: the whole evaluation, its validation part and the held-out rest."""

    all: Evaluation
    validation: Evaluation
    held_out: Evaluation


def split_indices(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Sorted sample indices of a validation part (``fraction`` of ``n``, at least one) and the held-out rest, drawn
    with ``seed``; None when ``n`` is too small to leave a sample on each side."""
    if n < 2:
        return None
    k = min(max(int(round(n * fraction)), 1), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[:k]), np.sort(order[k:])


class Producer(ABC):
    """Builds a model plus the data to calibrate, exercise and evaluate it.

    ``__init__`` only stores arguments (scikit-learn style); ``build`` does the work and caches the
    trained module in ``module_``.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    metric: ClassVar[Metric]
    kind: ClassVar[str] = "tensor"  # the model kind (models.kinds): tensor, token-lm, stream, tree-policy
    native_format: ClassVar[str] = "torch"  # the artifact format ``module`` is in (torch, or trees for GBRL)
    # keyword arguments that make the seconds-long version of this producer (contract tests, smoke runs)
    tiny_options: ClassVar[dict] = {}

    def __init__(self, seed: int = 0):
        self.seed = seed

    # --- model -------------------------------------------------------------------------------
    @abstractmethod
    def build(self) -> "Producer":
        """Train or load the model into ``self.module_`` (a ``torch.nn.Module`` in eval mode)."""

    @property
    def module(self):
        if not hasattr(self, "module_"):
            self.build()
        return self.module_

    def weight_files(self) -> list[Path]:
        """Files ``build`` loads that are made outside this package's code (weights trained by a separate
        command, kept in a cache): a sweep fingerprints them into a cell's key, so retrained weights are never
        scored from an earlier run's cells. Must not build anything."""
        return []

    @property
    @abstractmethod
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, without the batch dimension."""

    # --- data --------------------------------------------------------------------------------
    @abstractmethod
    def calibration_data(self, n: int = 128) -> np.ndarray:
        """Up to ``n`` samples from the training split, float32, batch first."""

    def example_inputs(self, batch: int = 1) -> np.ndarray:
        """``batch`` deterministic samples of the right shape and dtype."""
        x = self.calibration_data(max(batch, 1))
        reps = int(np.ceil(batch / len(x)))
        return np.ascontiguousarray(np.concatenate([x] * reps)[:batch])

    @abstractmethod
    def evaluate(self, predict: PredictFn) -> Evaluation:
        """Score a prediction function (batch of inputs -> batch of outputs) on held-out data."""

    def evaluate_split(self, predict: PredictFn, fraction: float, seed: int) -> "SplitEvaluation | None":
        """The metric on all the evaluation data and on two disjoint parts of it, from one pass over it: a
        validation part (``fraction`` of the samples, drawn with ``seed`` by ``split_indices``) and the held-out rest.
        A goal-driven deploy checks its accuracy budget on the first part and reports the second, so its choice is
        not tuned on the figure it reports. None (the default): this producer scores its data only as a whole."""
        return None

    def training_data(self):
        """What training passes (pruning, QAT) fine-tune on, in the form those passes document, or None
        when this producer offers none (those passes then refuse with a clear message)."""
        return None

    # --- deployment hints (read by targets and by ``bench.pipeline.deploy``) ---------------------------------
    def unsupported_formats(self) -> dict[str, str]:
        """Numeric formats a target must not build for this model, each with the reason (e.g. "int4":
        "no MatMul with weights: the model is a simulator"). Targets report them as unavailable."""
        return {}

    def unsupported_runtimes(self) -> dict[str, str]:
        """Optional runtimes a target should leave out for this model, each with the measured reason
        (e.g. "tvm": "untuned TVM needs over 20 minutes for ..."). The target's own runtime cannot be
        left out: a model it cannot run is not deployable there."""
        return {}

    def report_notes(self) -> list[str]:
        """Sentences every deploy report of this model must carry, e.g. which steps run outside the
        exported graph (an eigendecomposition done in preprocessing) and why."""
        return []

    def ood_inputs(self) -> dict[str, np.ndarray] | None:
        """Inputs for the OOD-score monitor (``bench.measure.ood_monitor``), or None: ``{"id": held-out
        in-distribution inputs, "<set name>": out-of-distribution inputs, ...}``, each shaped like
        ``input_shape``. Classifiers that give them get MSP / energy / Mahalanobis AUROC and the
        score shift of every compressed variant in their deploy report."""
        return None

    def check_input(self, x: np.ndarray) -> np.ndarray:
        """Reject inputs whose per-sample shape does not match ``input_shape``."""
        x = np.asarray(x)
        if tuple(x.shape[1:]) != tuple(self.input_shape):
            raise EdgesmithError(
                f"input has shape {tuple(x.shape)} but {self.name} expects (batch, "
                f"{', '.join(map(str, self.input_shape))}).",
                "reshape the input to the model's input shape.",
            )
        return x


PRODUCERS: Registry[type[Producer]] = Registry("model", "edgesmith.models:PRODUCER_MODULES", listing="edgesmith models")


def register_producer(cls: type[Producer]) -> type[Producer]:
    """Class decorator: make a producer available by its ``name``."""
    return PRODUCERS.register(cls.name, cls)


def producer_names() -> list[str]:
    return PRODUCERS.names()


def check_producer_options(name: str, kwargs: dict) -> type[Producer]:
    """The class of producer ``name`` once ``kwargs`` are known to be among its arguments (nothing is built)."""
    import inspect

    cls = PRODUCERS.get(name)
    params = [p for p in inspect.signature(cls.__init__).parameters.values()
              if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "seed"]
    unknown = sorted(set(kwargs) - {p.name for p in params} - {"seed"})
    if unknown:
        takes = ", ".join(f"{p.name}={p.default!r}" for p in params)
        raise EdgesmithError(f"model {name!r} does not take the option(s) {', '.join(unknown)}.",
                             f"{name} takes: {takes} (and seed)." if takes else
                             f"{name} takes no options (only seed); drop --model-option.")
    return cls


def producer_class(name: str) -> type[Producer] | None:
    """The registered class of ``name`` (its class attributes, without building anything); None if unknown."""
    return PRODUCERS.find(name)


def get_producer(name: str, **kwargs) -> Producer:
    cls = check_producer_options(name, kwargs)
    try:
        return cls(**kwargs)
    except TypeError as e:  # a value of the wrong type for one of them
        raise EdgesmithError(f"model {name!r} cannot take these options: {e}.",
                             "see `edgesmith models` for what each producer takes.") from None
