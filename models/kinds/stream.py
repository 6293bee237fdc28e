"""``stream``: a frame-by-frame signal model with state (e.g. a speech denoiser); real-time factor.

Inputs are (batch, frames, features...) clips; a producer of this kind says how long one frame of
signal lasts (``frame_seconds``). A runtime that takes whole clips is timed on one clip per batch
item; a recurrent step graph (state as inputs/outputs) is timed on one frame. The figure is the
real-time factor: processing time over the duration of the signal processed (below 1 keeps up).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from edgesmith.models.kinds.base import Kind, KindOptions, Speed, option, register_kind
from edgesmith.common.checks import is_int


@dataclass(frozen=True)
class StreamOptions(KindOptions):
    sparsity: float = option(0.9, "unstructured weight sparsity of the pruned variants")
    prune_epochs: int = option(10, "fine-tuning epochs while pruning (cubic schedule)")
    prune_end: float = option(0.6, "share of pruning fine-tuning after which the final sparsity is reached")
    qat_epochs: int = option(30, "quantization-aware fine-tuning epochs before the fixed-point conversion")

    def validate(self) -> None:
        if isinstance(self.sparsity, bool) or not 0.0 <= float(self.sparsity) < 1.0:
            self._fail("sparsity", f"is {self.sparsity!r}", "use a fraction in [0, 1), e.g. 0.9.")
        if not 0.0 < float(self.prune_end) <= 1.0:
            self._fail("prune_end", f"is {self.prune_end!r}", "use a fraction in (0, 1].")
        for name, lo in (("prune_epochs", 1), ("qat_epochs", 0)):
            v = getattr(self, name)
            if not is_int(v, lo):
                self._fail(name, f"is {v!r}", f"use a whole number of at least {lo}.")


@register_kind
class StreamKind(Kind):
    name = "stream"
    description = "frame-by-frame signal model with state; metric from the producer; real-time factor"
    unit = "clip"
    default_batch_sizes = (1,)
    default_n_calibration = 32
    probe_samples = 4  # a clip is hundreds of frames: 16 of them cost over a minute in the Lava simulator
    sequential_axis = 0
    export_pass = "export-step-onnx"  # the streaming step: one frame and the state in, output and state out
    Options: ClassVar = StreamOptions
    required = (("frame_seconds", "seconds of signal in one input frame"),)

    def speed(self, p50_s: float, batch: int, producer, artifact) -> Speed:
        frames = 1 if artifact.meta.get("recurrent") else int(producer.input_shape[0])
        seconds = batch * frames * float(producer.frame_seconds)
        return Speed("real_time_factor", p50_s / seconds, "x real time", higher_is_better=False)
