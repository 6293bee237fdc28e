"""Unstructured magnitude pruning of Linear and ConvNd weights, with an honest sparse-size account.

The smallest-magnitude weights are set to zero: per layer (``scope="layer"``: every layer loses the
same fraction) or across all layers at once (``scope="global"``: one magnitude threshold, so layers
with many small weights lose more). Biases are not touched. The result is a pruned deep copy; the
input module is left as it was.

Zeros only save space if they are stored sparsely, so the report gives, per weight tensor (viewed
as [out_channels, everything else]):

* dense: ``numel * 4`` bytes (fp32);
* CSR: ``nnz * 4`` (fp32 values) + ``nnz * 4`` (int32 column indices) + ``(rows + 1) * 4``
  (int32 row pointers);
* bitmask: ``nnz * 4`` (fp32 values) + ``ceil(numel / 8)`` (one bit per position);

and takes the smallest of the three per tensor as its sparse size. The torch artifact (and any
ONNX exported from it) still stores the zeros densely: ``size_after_bytes`` is that dense size, and
the sparse figure is in ``extra["sparse_storage"]``.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from edgesmith.compress.base import Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.compress.onnx_analysis import bits_per_weight, report_db, sqnr_db
from edgesmith.common import EdgesmithError

SCOPES = ("layer", "global")
PRUNABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass
class MagnitudePruneConfig(PassConfig):
    """Zero the ``sparsity`` fraction of smallest-magnitude weights, per ``scope`` ("layer"/"global")."""

    kind: ClassVar[str] = "prune-magnitude"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "torch"

    sparsity: float = 0.5
    scope: str = "layer"

    def validate(self) -> None:
        s = self.sparsity
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 <= float(s) < 1.0:
            self._fail("sparsity", f"is {s!r}", "use a fraction from 0 (no pruning) up to but not including 1.")
        if self.scope not in SCOPES:
            self._fail("scope", f"is {self.scope!r}", f"use one of: {', '.join(SCOPES)}.")


def sparse_storage_bytes(rows: int, cols: int, nnz: int) -> dict[str, int]:
    """Bytes of a [rows, cols] fp32 matrix with ``nnz`` non-zeros: dense, CSR and bitmask layouts."""
    numel = rows * cols
    return {
        "dense": numel * 4,
        "csr": nnz * 4 + nnz * 4 + (rows + 1) * 4,
        "bitmask": nnz * 4 + math.ceil(numel / 8),
    }


def prunable_weights(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, weight) of every Linear/ConvNd in ``module``, in module order."""
    return [(f"{name}.weight" if name else "weight", m.weight) for name, m in module.named_modules()
            if isinstance(m, PRUNABLE) and m.weight is not None]


def _order_smallest(values: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` smallest |values| (ties broken by position, so results are reproducible)."""
    order = torch.argsort(values.abs().flatten(), stable=True)
    return order[:k]


def magnitude_masks(weights: list[torch.Tensor], sparsity: float, scope: str) -> list[torch.Tensor]:
    """Boolean keep-masks, one per weight, zeroing round(sparsity * numel) entries (per layer or in all)."""
    if scope == "layer":
        masks = []
        for w in weights:
            keep = torch.ones(w.numel(), dtype=torch.bool)
            keep[_order_smallest(w, int(round(sparsity * w.numel())))] = False
            masks.append(keep.view_as(w))
        return masks
    flat = torch.cat([w.detach().flatten() for w in weights])
    keep = torch.ones(flat.numel(), dtype=torch.bool)
    keep[_order_smallest(flat, int(round(sparsity * flat.numel())))] = False
    return [m.view_as(w) for m, w in zip(torch.split(keep, [w.numel() for w in weights]), weights)]


@register_pass(MagnitudePruneConfig)
def _prune_magnitude(artifact: Artifact, config: MagnitudePruneConfig, ctx: PassContext) -> PassResult:
    pruned = copy.deepcopy(artifact.module).eval()
    named = prunable_weights(pruned)
    if not named:
        raise EdgesmithError("prune-magnitude found no Linear or Conv layer to prune in the model.",
                             "apply it to a model with nn.Linear or nn.ConvNd layers, or drop the pass.")
    originals = [w.detach().clone() for _, w in named]
    masks = magnitude_masks(originals, float(config.sparsity), config.scope)
    layers, storage = [], []
    with torch.no_grad():
        for (name, w), orig, keep in zip(named, originals, masks):
            w.mul_(keep.to(w.dtype))
            rows = w.shape[0]
            nnz = int(torch.count_nonzero(w))
            sizes = sparse_storage_bytes(rows, w.numel() // rows, nnz)
            best = min(sizes, key=sizes.get)
            storage.append({"layer": name, "sparsity": 1.0 - nnz / w.numel(), "nnz": nnz, **{
                f"{k}_bytes": v for k, v in sizes.items()}, "best_format": best, "best_bytes": sizes[best]})
            layers.append(LayerReport(name, "pruned", 8.0 * sizes[best] / w.numel(), w.numel(),
                                      {"weight_sqnr_db": report_db(sqnr_db(orig.numpy(), w.detach().numpy()))}))
    nnz_total = sum(s["nnz"] for s in storage)
    total = sum(w.numel() for _, w in named)
    dense_weights = sum(s["dense_bytes"] for s in storage)
    sparse_weights = sum(s["best_bytes"] for s in storage)
    size_dense = artifact.size_bytes()
    sparse_model = size_dense - dense_weights + sparse_weights
    extra = {"sparse_storage": {
        "sparsity": 1.0 - nnz_total / total,
        "dense_bytes": dense_weights,
        "csr_bytes": sum(s["csr_bytes"] for s in storage),
        "bitmask_bytes": sum(s["bitmask_bytes"] for s in storage),
        "best_bytes": sparse_weights,
        "model_sparse_size_bytes": sparse_model,
        "layers": storage,
    }}
    notes = [
        f"{config.scope} magnitude pruning to {config.sparsity:.0%}: {total - nnz_total} of {total} weights are zero.",
        f"sparse storage of the pruned weights: {sparse_weights} bytes (best of dense/CSR/bitmask per tensor) vs "
        f"{dense_weights} dense; whole model {sparse_model} vs {size_dense} bytes.",
        "bits_per_weight is the best sparse layout's bits over all positions of the pruned weights.",
        "size_after_bytes is the dense size: the torch module and the exported ONNX still store the zeros densely.",
    ]
    meta = {**artifact.meta, "sparsity": extra["sparse_storage"]["sparsity"]}
    new = Artifact("torch", module=pruned, meta=meta)
    report = PassReport(config.to_dict(), "torch", "torch", size_dense, new.size_bytes(), layers=layers,
                        notes=notes, extra=extra)
    report.bits_per_weight = bits_per_weight(layers)
    return PassResult(new, report)
