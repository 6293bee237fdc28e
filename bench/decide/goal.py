"""What a goal-driven deploy is asked: an accuracy budget and what to make small within it."""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import Config, EdgesmithError
from edgesmith.common.checks import is_int

OBJECTIVES = ("latency", "energy", "size", "memory")


@dataclass
class Goal(Config):
    """An accuracy budget and an objective (``deploy --max-drop 1% --objective latency``).

    ``max_drop``: how far the task metric may fall below the fp32 model's (rise above, for a metric where lower is
    better), in the metric's units (``0.01``: one point of accuracy, as NNCF's ``max_drop``), or, with ``relative``,
    as a fraction of the fp32 figure (``--max-drop 1%``). ``min_sqnr``: instead, a floor in dB on the fidelity metric
    (output SQNR against fp32, the metric of a deploy without labels). ``objective``: what the choice minimises
    among the candidates within budget: latency (p50 at ``batch``), energy (per sample), size (on disk) or memory
    (peak RSS at ``batch``). ``validation_fraction``: the share of the evaluation samples the budget is checked on; the
    choice's figure is reported on the rest. ``restore``: a quantized candidate that misses the budget gets its most
    harmful layers back in higher precision, the fewest that bring it within budget (ranked, then bisected).
    ``allow_qat``: when no compressed post-training candidate meets the budget, the target's quantization-aware
    training variants (brevitas, ``qat_epochs`` epochs on the producer's training data or ``--train-data``) are built
    and judged too; they train, so only when asked.
    """

    max_drop: float | None = None
    relative: bool = False
    min_sqnr: float | None = None
    objective: str = "latency"
    batch: int = 1
    validation_fraction: float = 0.5
    restore: bool = True
    allow_qat: bool = False
    qat_epochs: int = 3

    def validate(self) -> None:
        number = (int, float)
        if (self.max_drop is None) == (self.min_sqnr is None):
            self._fail("max_drop", "and min_sqnr are both given" if self.max_drop is not None else "and min_sqnr are "
                       "both missing", "give one budget: --max-drop 1% (or 0.01 in the metric's units) or --min-sqnr 30.")
        if self.max_drop is not None and (isinstance(self.max_drop, bool) or not isinstance(self.max_drop, number)
                                          or not 0 <= self.max_drop < float("inf")):
            self._fail("max_drop", f"is {self.max_drop!r}", "use a number >= 0, e.g. 0.01 or 1%.")
        if self.relative and self.max_drop is not None and self.max_drop >= 1:
            self._fail("max_drop", f"is {self.max_drop:.0%} of the fp32 figure", "use a relative drop below 100%.")
        if self.min_sqnr is not None and (isinstance(self.min_sqnr, bool) or not isinstance(self.min_sqnr, number)
                                          or not -1e3 < self.min_sqnr < 1e3):
            self._fail("min_sqnr", f"is {self.min_sqnr!r}", "use a number of dB, e.g. 30.")
        if not is_int(self.qat_epochs, 1):
            self._fail("qat_epochs", f"is {self.qat_epochs!r}", "use a whole number of epochs, at least 1.")
        for name in ("relative", "restore", "allow_qat"):
            if not isinstance(getattr(self, name), bool):
                self._fail(name, f"is {getattr(self, name)!r}", "use true or false.")
        if self.objective not in OBJECTIVES:
            self._fail("objective", f"is {self.objective!r}", f"use one of: {', '.join(OBJECTIVES)}.")
        if not is_int(self.batch, 1):
            self._fail("batch", f"is {self.batch!r}", "use a batch size of at least 1.")
        f = self.validation_fraction
        if isinstance(f, bool) or not isinstance(f, number) or not 0 < f < 1:
            self._fail("validation_fraction", f"is {f!r}", "use a fraction between 0 and 1, e.g. 0.5.")

    @classmethod
    def parse_drop(cls, text: str) -> tuple[float, bool]:
        """``"1%"`` -> (0.01, relative), ``"0.01"`` -> (0.01, absolute): the form ``--max-drop`` takes."""
        s = str(text).strip()
        relative = s.endswith("%")
        try:
            value = float(s[:-1] if relative else s)
        except ValueError:
            raise EdgesmithError(f"--max-drop {text!r} is not a number.",
                                 "write e.g. --max-drop 1% (relative) or --max-drop 0.01 (in the metric's units).") from None
        return (value / 100 if relative else value), relative

    def describe(self) -> str:
        """The budget in words: "a drop of at most 1% of fp32's accuracy", "output SQNR of at least 30 dB"."""
        if self.min_sqnr is not None:
            return f"output SQNR of at least {self.min_sqnr:g} dB against fp32"
        return (f"a drop of at most {self.max_drop:.2%} of the fp32 figure" if self.relative
                else f"a drop of at most {self.max_drop:g} (the metric's units) from the fp32 figure")
