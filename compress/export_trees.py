"""Export a tree ensemble (``trees`` artifact: a ``GBTEnsemble`` in ``module``) to ONNX or C source.

``export-tree-onnx`` writes one ``ai.onnx.ml`` TreeEnsembleRegressor (ml opset 3): every tree as
its complete heap (``BRANCH_GT``: ``x > t`` takes the true, right branch), leaf weights
``-lr * leaf`` folded in, ``bias`` as base values, so onnxruntime returns the engine's
``predict`` up to float32 rounding.

``export-tree-c`` writes a dependency-free C99 file with ``gbt_predict_batch(const float *x,
int n, float *out)``. Leaves are ``float`` (lr folded in) or fixed-point ``int8``/``int16`` with one
scale per output: ``q = round(-lr * leaf / scale)``, ``out = bias + scale * sum q`` (integer sums).
Each quantised leaf is off by at most ``scale / 2``, so an output is off by at most
``n_trees * scale / 2`` plus float32 rounding of the final scale-and-add; float leaves are off by
at most the float32 summation bound ``(n_trees + 1) * u * (|bias| + sum max|leaf|)``. The bound is
recorded per output as ``error_bound`` in the artifact meta and the report; typical errors are far
smaller because rounding errors cancel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.common import EdgesmithError, atomic_path

INPUT_NAME = "input"
OUTPUT_NAME = "output"
C_LEAF_TYPES = {"float": ("float", None), "int8": ("int8_t", 127), "int16": ("int16_t", 32767)}


def _check_ensemble(artifact: Artifact):
    ens = artifact.module
    for attr in ("features", "thresholds", "leaves", "lr", "bias", "max_depth"):
        if not hasattr(ens, attr):
            raise EdgesmithError(f"{artifact.describe()} does not hold a tree ensemble (no {attr!r}).",
                                 "pass a trees artifact whose module is a models.gbrl.GBTEnsemble.")
    if ens.n_trees == 0:
        raise EdgesmithError("the tree ensemble has no trees.", "fit at least one tree before exporting.")
    return ens


def folded_leaves(ens) -> np.ndarray:
    """Leaf weights as the exports add them: ``-lr * leaf`` per output, float32 ``(trees, leaves, k)``."""
    return (-ens.lr[None, None, :].astype(np.float64) * ens.leaves).astype(np.float32)


# --- ONNX ----------------------------------------------------------------------------------------------


@dataclass
class ExportTreeOnnxConfig(PassConfig):
    kind: ClassVar[str] = "export-tree-onnx"
    input_format: ClassVar[str] = "trees"
    output_format: ClassVar[str] = "onnx"

    opset: int = 17  # default-domain opset; the tree op uses ai.onnx.ml version 3

    def validate(self) -> None:
        if not 13 <= self.opset <= 21:
            self._fail("opset", f"is {self.opset}", "use an opset between 13 and 21 (17 is the default).")


def ensemble_to_onnx(ens, opset: int = 17):
    """The ``onnx.ModelProto`` of ``ens`` (dynamic batch, input ``input``, output ``output``)."""
    from onnx import TensorProto, helper

    T, D, k = ens.n_trees, ens.max_depth, ens.output_dim
    n_split, n_leaf = (1 << D) - 1, 1 << D
    per_tree = n_split + n_leaf
    heap = np.arange(per_tree)
    tree_ids = np.repeat(np.arange(T), per_tree)
    node_ids = np.tile(heap, T)
    is_split = np.tile(heap < n_split, T)
    feat = np.zeros((T, per_tree), np.int64)
    feat[:, :n_split] = ens.features
    vals = np.zeros((T, per_tree), np.float32)
    vals[:, :n_split] = ens.thresholds
    true_ids = np.where(is_split, 2 * node_ids + 2, 0)
    false_ids = np.where(is_split, 2 * node_ids + 1, 0)
    modes = np.where(is_split, "BRANCH_GT", "LEAF")
    w = folded_leaves(ens)  # (T, n_leaf, k)
    t_tree = np.repeat(np.arange(T), n_leaf * k)
    t_node = np.tile(np.repeat(np.arange(n_split, per_tree), k), T)
    t_id = np.tile(np.arange(k), T * n_leaf)
    node = helper.make_node(
        "TreeEnsembleRegressor", [INPUT_NAME], [OUTPUT_NAME], domain="ai.onnx.ml",
        n_targets=k, aggregate_function="SUM", post_transform="NONE",
        base_values=ens.bias.astype(np.float32).tolist(),
        nodes_treeids=tree_ids.tolist(), nodes_nodeids=node_ids.tolist(),
        nodes_featureids=feat.ravel().tolist(), nodes_values=vals.ravel().tolist(),
        nodes_modes=modes.tolist(), nodes_truenodeids=true_ids.tolist(), nodes_falsenodeids=false_ids.tolist(),
        nodes_missing_value_tracks_true=[0] * len(tree_ids),
        target_treeids=t_tree.tolist(), target_nodeids=t_node.tolist(), target_ids=t_id.tolist(),
        target_weights=w.ravel().tolist(),
    )
    graph = helper.make_graph(
        [node], "gbt_ensemble",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", ens.input_dim])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", k])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 3)],
                              producer_name="edgesmith")
    model.ir_version = 8
    return model


@register_pass(ExportTreeOnnxConfig)
def _export_tree_onnx(artifact: Artifact, config: ExportTreeOnnxConfig, ctx: PassContext) -> PassResult:
    import onnx

    ens = _check_ensemble(artifact)
    model = ensemble_to_onnx(ens, config.opset)
    onnx.checker.check_model(model)
    out = ctx.workdir / "trees.onnx"
    with atomic_path(out, force=True) as tmp:
        onnx.save(model, str(tmp))
    meta = {**artifact.meta, "input_name": INPUT_NAME, "output_name": OUTPUT_NAME, "input_shape": [ens.input_dim],
            "precision": "fp32", "n_trees": ens.n_trees}
    new = Artifact("onnx", path=out, meta=meta)
    report = PassReport(config.to_dict(), "trees", "onnx", artifact.size_bytes(), new.size_bytes(), bits_per_weight=32.0,
                        notes=[f"{ens.n_trees} trees of depth {ens.max_depth} as one TreeEnsembleRegressor"])
    return PassResult(new, report)


# --- C ---------------------------------------------------------------------------------------------------


@dataclass
class ExportTreeCConfig(PassConfig):
    kind: ClassVar[str] = "export-tree-c"
    input_format: ClassVar[str] = "trees"
    output_format: ClassVar[str] = "c"

    leaves: str = "float"

    def validate(self) -> None:
        if self.leaves not in C_LEAF_TYPES:
            self._fail("leaves", f"is {self.leaves!r}", f"use one of {', '.join(C_LEAF_TYPES)}.")


def _c_floats(a) -> str:
    """Exact float32 literals (C99 hex floats), infinities as INFINITY."""
    return ", ".join("INFINITY" if np.isinf(v) else float(v).hex() + "f" for v in np.asarray(a, np.float32).ravel())


def _c_ints(a) -> str:
    return ", ".join(str(int(v)) for v in np.asarray(a).ravel())


def _float_sum_bound(ens, w: np.ndarray, terms: int | None = None) -> np.ndarray:
    """Worst-case float32 rounding of summing the leaves (``n * u * sum|terms|``), per output.

    For fixed-point leaves the sum is exact and only the final scale-and-add rounds (``terms=2``).
    """
    u = float(np.finfo(np.float32).eps) / 2
    mass = np.abs(ens.bias.astype(np.float64)) + np.abs(w).max(axis=1).sum(axis=0)
    n = ens.n_trees + 1 if terms is None else terms
    return n * u * mass * 1.01


def quantize_leaves(ens, leaves: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, scale, error_bound)``: integer leaves, per-output scale, per-output worst-case output error."""
    ctype, qmax = C_LEAF_TYPES[leaves]
    w = folded_leaves(ens).astype(np.float64)
    amax = np.abs(w).max(axis=(0, 1))
    scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale.astype(np.float64)), -qmax, qmax).astype(np.int64)
    bound = ens.n_trees * scale.astype(np.float64) / 2
    return q, scale, bound


def ensemble_to_c(ens, leaves: str = "float") -> tuple[str, dict]:
    """C99 source of ``ens`` and facts about it (leaf type, scales, error bound)."""
    ctype, qmax = C_LEAF_TYPES[leaves]
    T, D, k = ens.n_trees, ens.max_depth, ens.output_dim
    n_split, n_leaf = (1 << D) - 1, 1 << D
    ftype = "uint8_t" if ens.input_dim <= 256 else "uint16_t"
    info: dict = {"leaves": leaves, "n_trees": T, "depth": D, "n_inputs": ens.input_dim, "n_outputs": k}
    if qmax is None:
        leaf_vals, acc_t, scale_line = _c_floats(folded_leaves(ens)), "float", ""
        finish = "out[c] = GBT_BIAS[c] + acc[c];"
        info["error_bound"] = _float_sum_bound(ens, folded_leaves(ens)).tolist()
    else:
        q, scale, bound = quantize_leaves(ens, leaves)
        acc_t = "int32_t" if T * qmax < 2**31 - 1 else "int64_t"
        leaf_vals = _c_ints(q)
        scale_line = f"static const float GBT_SCALE[{k}] = {{{_c_floats(scale)}}};\n"
        finish = "out[c] = GBT_BIAS[c] + GBT_SCALE[c] * (float)acc[c];"
        bound = bound + _float_sum_bound(ens, q * scale[None, None, :].astype(np.float64), terms=2)
        info.update(scale=scale.tolist(), error_bound=bound.tolist(), accumulator=acc_t)
    src = f"""/* Generated by edgesmith export-tree-c: {T} trees, depth {D}, {ens.input_dim} inputs, {k} outputs,
 * {leaves} leaves. A split node i sends x[feature] > threshold to child 2i+2, else 2i+1. */
#include <math.h>
#include <stdint.h>

#define GBT_N_TREES {T}
#define GBT_DEPTH {D}
#define GBT_N_SPLIT {n_split}
#define GBT_N_LEAF {n_leaf}
#define GBT_N_IN {ens.input_dim}
#define GBT_N_OUT {k}

static const {ftype} GBT_FEATURE[{T}][{n_split}] = {{{_c_ints(ens.features)}}};
static const float GBT_THRESHOLD[{T}][{n_split}] = {{{_c_floats(ens.thresholds)}}};
static const {ctype} GBT_LEAF[{T}][{n_leaf}][{k}] = {{{leaf_vals}}};
static const float GBT_BIAS[{k}] = {{{_c_floats(ens.bias)}}};
{scale_line}
int gbt_n_inputs(void) {{ return GBT_N_IN; }}
int gbt_n_outputs(void) {{ return GBT_N_OUT; }}

void gbt_predict(const float *x, float *out) {{
    {acc_t} acc[GBT_N_OUT] = {{0}};
    for (int t = 0; t < GBT_N_TREES; ++t) {{
        int node = 0;
        for (int l = 0; l < GBT_DEPTH; ++l)
            node = 2 * node + 1 + (x[GBT_FEATURE[t][node]] > GBT_THRESHOLD[t][node]);
        const {ctype} *leaf = GBT_LEAF[t][node - GBT_N_SPLIT];
        for (int c = 0; c < GBT_N_OUT; ++c) acc[c] += leaf[c];
    }}
    for (int c = 0; c < GBT_N_OUT; ++c) {finish}
}}

int gbt_predict_batch(const float *x, int n, float *out) {{
    for (int i = 0; i < n; ++i) gbt_predict(x + (long)i * GBT_N_IN, out + (long)i * GBT_N_OUT);
    return 0;
}}
"""
    return src, info


@register_pass(ExportTreeCConfig)
def _export_tree_c(artifact: Artifact, config: ExportTreeCConfig, ctx: PassContext) -> PassResult:
    ens = _check_ensemble(artifact)
    src, info = ensemble_to_c(ens, config.leaves)
    out = ctx.workdir / f"trees.{config.leaves}.c"
    with atomic_path(out, force=True) as tmp:
        tmp.write_text(src)
    meta = {**artifact.meta, "input_shape": [ens.input_dim], "n_outputs": ens.output_dim, "c_entry": "gbt_predict_batch",
            "precision": config.leaves, **{f"c_{k}": v for k, v in info.items()}}
    leaf_bits = {"float": 32.0, "int8": 8.0, "int16": 16.0}[config.leaves]
    # the model's bytes in the compiled binary, not the source text: what a call reads
    n_split = (1 << ens.max_depth) - 1
    model_bytes = int(ens.n_trees * (n_split * (1 + 4) + (1 << ens.max_depth) * ens.output_dim * leaf_bits / 8))
    meta["weight_bytes"] = model_bytes
    new = Artifact("c", path=out, meta=meta)
    report = PassReport(config.to_dict(), "trees", "c", artifact.size_bytes(), model_bytes, bits_per_weight=leaf_bits,
                        extra={"error_bound": info["error_bound"], "source_bytes": new.size_bytes()},
                        notes=[f"{config.leaves} leaves; worst-case output error {max(info['error_bound']):.3g}"])
    return PassResult(new, report)
