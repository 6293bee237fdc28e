"""``tree-policy``: a gradient-boosted tree ensemble acting as an RL policy (observations -> action logits).

Its native form is a ``trees`` artifact run by the Numba engine; targets may export it as an ONNX
TreeEnsemble or as C source compiled to a shared library. Timed per batch of observations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from edgesmith.models.kinds.base import Kind, KindOptions, Speed, option, register_kind

LEAVES = ("float", "int8", "int16")


@dataclass(frozen=True)
class TreePolicyOptions(KindOptions):
    c_leaves: str = option("float", "leaf values of the C export: float, or int8/int16 with one scale per output")

    def validate(self) -> None:
        if self.c_leaves not in LEAVES:
            self._fail("c_leaves", f"is {self.c_leaves!r}", f"use one of {', '.join(LEAVES)}.")


@register_kind
class TreePolicyKind(Kind):
    name = "tree-policy"
    description = "gradient-boosted tree ensemble policy (observations -> action logits); ONNX and C exports"
    unit = "decision"
    default_batch_sizes = (1, 64)
    export_pass = "export-tree-onnx"
    Options: ClassVar = TreePolicyOptions
    native_format = "trees"

    def speed(self, p50_s: float, batch: int, producer, artifact) -> Speed:
        return Speed("throughput", batch / p50_s, "decisions/s")
