"""``export-step-onnx``: the one-step graph of a recurrent model, its state as inputs and outputs.

For ``token-lm`` modules (and any module with the same protocol): ``zero_state(batch)`` returns a
NamedTuple of tensors and ``step(token (B,), state) -> (logits (B, V), state)`` advances one token.
The graph is ``(token int64 (B,), state... ) -> (logits (B, V), state_out...)`` with the batch first in
every tensor and dynamic, so ``runtimes.stateful.run_sequence`` can feed whole batches of sequences.
A module keeps its own state layout (``state_batch_dim``, RWKV: 1); the graph transposes at the edges, or,
for a module whose state tensors lead with a layer dimension (``state_layer_dim = 0``, RWKV), has one tensor
per field and layer (``wkv.0``, ``wkv.1``, ...) that the model's layers read and write directly.
Linears are exported as MatMul; layers an RWKV quantizer replaced are rewritten from their codes
(MatMulNBits for 4-bit SQ, a Gather-dequantize for VQ; ``compress.rwkvquant.export``).
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import torch
from torch import nn

from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.common.checks import is_int
from edgesmith.compress.base import (INIT_SUFFIX, Artifact, PassConfig, PassContext, PassReport, PassResult,
                                    register_pass)

TOKEN_INPUT, LOGITS_OUTPUT = "token", "logits"


class StepModule(nn.Module):
    """``model.step`` with batch-first state tensors at the graph's edges. With ``layers`` (a model whose state
    tensors lead with a layer dimension, ``state_layer_dim = 0``) the graph has one tensor per field and layer,
    handed to the model as per-layer lists: no gather from and stack into a whole-model state each token."""

    def __init__(self, model: nn.Module, state_type, batch_dim: int, layers: int = 0):
        super().__init__()
        self.model, self.state_type, self.batch_dim, self.layers = model, state_type, batch_dim, layers

    def forward(self, token, *state):
        if self.layers:
            fields = [list(state[i:i + self.layers]) for i in range(0, len(state), self.layers)]
            logits, new = self.model.step(token, self.state_type(*fields))
            return (logits, *[s for field in new for s in field])
        st = self.state_type(*[s.movedim(0, self.batch_dim) for s in state])
        logits, new = self.model.step(token, st)
        return (logits, *[s.movedim(self.batch_dim, 0) for s in new])


def graph_state(model: nn.Module, state, bdim: int) -> tuple[list[str], list[torch.Tensor], int]:
    """The step graph's state: names, batch-first tensors (batch 1; ``bdim`` the model's state batch dim), and the
    layer count when split per layer."""
    if not hasattr(state, "_fields"):
        raise EdgesmithError(f"{type(model).__name__}.zero_state() returns {type(state).__name__}, not a NamedTuple.",
                             "return the state as a NamedTuple of tensors so each gets a name in the graph.")
    fields = list(state._fields)
    if getattr(model, "state_layer_dim", None) is None:
        return fields, [s.movedim(bdim, 0).contiguous() for s in state], 0
    layers = {int(s.shape[0]) for s in state}
    if model.state_layer_dim != 0 or bdim != 1 or len(layers) != 1:
        raise EdgesmithError(f"{type(model).__name__}: a per-layer state needs every state tensor as (layers, batch, "
                             f"...) with one layer count; has layer dim {model.state_layer_dim}, batch dim {bdim}, "
                             f"layer counts {sorted(layers)}.", "fix the model's state_layer_dim / state_batch_dim.")
    n = layers.pop()
    return ([f"{f}.{i}" for f in fields for i in range(n)],
            [s[i].contiguous() for s in state for i in range(n)], n)


def check_step_module(module) -> None:
    for attr in ("step", "zero_state"):
        if not callable(getattr(module, attr, None)):
            raise EdgesmithError(f"export-step-onnx needs a recurrent module with step() and zero_state(); "
                                 f"{type(module).__name__} has no {attr}().",
                                 "use it on token-lm models, or export stateless models with export-onnx.")


def export_step_onnx(model: nn.Module, path, *, accuracy_level: int = 4, opset: int = 17,
                     batch: int | None = None, vq_form: str = "gather", force: bool = False) -> dict:
    """Write the step graph of ``model`` (fp or quantized) to ``path``; returns counts (linears by form, graph
    nodes) and the recurrent spec."""
    from edgesmith.compress.rwkvquant.export import matmul_copy, rewrite_quantized

    check_step_module(model)
    m, quantized = matmul_copy(model)
    bdim = int(getattr(model, "state_batch_dim", 0))
    state = model.zero_state(1)
    names, batch_first, layers = graph_state(model, state, bdim)
    # a model may step on something other than a token: ``step_input = (name, dtype, per-sample shape)``
    in_name, in_dtype, in_shape = getattr(model, "step_input", (TOKEN_INPUT, torch.long, ()))
    out_name = getattr(model, "step_output", LOGITS_OUTPUT)
    b = 1 if batch is None else int(batch)
    args = (torch.zeros((b, *in_shape), dtype=in_dtype), *[s.expand(b, *s.shape[1:]).contiguous() for s in batch_first])
    outs = [f"{n}_out" for n in names]
    dyn = {n: {0: "batch"} for n in (in_name, out_name, *names, *outs)} if batch is None else None
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(StepModule(m, type(state), bdim, layers), args, buf, input_names=[in_name, *names],
                              output_names=[out_name, *outs], opset_version=opset, dynamic_axes=dyn,
                              dynamo=False)
    except Exception as e:  # the exporter raises many types
        raise EdgesmithError(f"ONNX export of the model's step failed: {str(e).splitlines()[0][:200]}",
                             "the step must use standard ops; report this model configuration.") from None
    g = onnx.load_from_string(buf.getvalue())
    counts = rewrite_quantized(g, quantized, accuracy_level, vq_form)
    onnx.checker.check_model(g, full_check=True)
    spec = {"input": in_name, "output": out_name, "state": [[n, o] for n, o in zip(names, outs)],
            "input_dtype": str(args[0].dtype).replace("torch.", ""),
            "state_shapes": {n: list(s.shape[1:]) for n, s in zip(names, batch_first)},
            "state_dtypes": {n: str(s.dtype).replace("torch.", "") for n, s in zip(names, batch_first)}}
    if batch is not None:
        spec["batch"] = int(batch)
    init_path = Path(str(path) + INIT_SUFFIX)
    with atomic_path(path, force=force) as tmp:
        onnx.save(g, str(tmp))
    if any(bool(s.abs().sum()) for s in batch_first):  # a trained initial state (e.g. RWKV time_state)
        with atomic_path(init_path, force=True) as tmp, open(tmp, "wb") as f:
            np.savez(f, **{n: s[0].detach().numpy() for n, s in zip(names, batch_first)})
        spec["initial_state"] = True
    return {**counts, "nodes": len(g.graph.node), "recurrent": spec}


@dataclass
class ExportStepOnnxConfig(PassConfig):
    """torch recurrent module (``step``/``zero_state``) -> ONNX step graph, state as inputs and outputs.

    ``accuracy_level`` goes to MatMulNBits nodes of 4-bit layers (4: int8 activations, the fast CPU path).
    ``batch``: None keeps the batch dimension dynamic (what perplexity over batches of sequences needs);
    an integer fixes it (1: a decode graph; every shape is static, so onnxruntime folds the shape arithmetic).
    ``vq_form``: how vector-quantized layers are written (``compress.rwkvquant.export``): ``gather`` (indices
    and codebooks, the smallest file) or ``int8`` (an exact 8-bit MatMulNBits: 8 bits per weight in memory
    at run time instead of the 32 the folded gather takes).
    """

    kind: ClassVar[str] = "export-step-onnx"
    contract_fixture: ClassVar[str] = "rwkv-torch"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "onnx"

    opset: int = 17
    accuracy_level: int = 4
    batch: int | None = None
    vq_form: str = "gather"

    def validate(self) -> None:
        from edgesmith.compress.rwkvquant.export import VQ_FORMS

        if self.vq_form not in VQ_FORMS:
            self._fail("vq_form", f"is {self.vq_form!r}", f"use one of: {', '.join(VQ_FORMS)}.")
        if self.batch is not None and (not is_int(self.batch, 1)):
            self._fail("batch", f"is {self.batch!r}", "use a positive integer (1 for decoding) or leave it unset.")
        if not is_int(self.opset, 13, 21):
            self._fail("opset", f"is {self.opset!r}", "use an ONNX opset from 13 to 21.")
        if self.accuracy_level not in (0, 1, 2, 3, 4):
            self._fail("accuracy_level", f"is {self.accuracy_level!r}", "use 0-4 (4: int8 activations).")


@register_pass(ExportStepOnnxConfig)
def _export_step(artifact: Artifact, config: ExportStepOnnxConfig, ctx: PassContext) -> PassResult:
    path = ctx.workdir / "model.step.onnx"
    res = export_step_onnx(artifact.module, path, accuracy_level=config.accuracy_level, opset=config.opset,
                           batch=config.batch, vq_form=config.vq_form, force=True)
    meta = {k: v for k, v in artifact.meta.items() if k != "input_shape"}
    meta.update(recurrent=res["recurrent"], input_dtype=res["recurrent"]["input_dtype"])
    new = Artifact("onnx", path=path, meta=meta)
    notes = [f"{res['matmulnbits']} linear(s) as MatMulNBits, {res['vq_gather']} as Gather-dequantize, "
             f"{res['vq_int8']} as 8-bit MatMulNBits of codebook codes, {res['fp32_matmul']} fp32 MatMul; "
             "the sequence loop runs outside the graph (state fed back)"]
    report = PassReport(config.to_dict(), "torch", "onnx", artifact.size_bytes(), new.size_bytes(), notes=notes,
                        extra={k: res[k] for k in ("matmulnbits", "vq_gather", "vq_int8", "fp32_matmul")})
    return PassResult(new, report)


def step_greedy_ort(path, prompt, n_new: int, threads: int = 1) -> list[int]:
    """Greedy decoding of an exported step graph in onnxruntime, batch 1 (checks against ``torch_greedy``)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ins = [i for i in sess.get_inputs() if i.name != TOKEN_INPUT]
    state = {i.name: np.zeros([1, *i.shape[1:]], np.float32) for i in ins}
    outs = [o.name for o in sess.get_outputs()]

    def step(tok):
        res = dict(zip(outs, sess.run(None, {TOKEN_INPUT: np.array([tok], np.int64), **state})))
        state.update({n: res[f"{n}_out"] for n in state})
        return res[LOGITS_OUTPUT][0]

    return greedy_tokens(step, prompt, n_new)


def greedy_tokens(step, prompt, n_new: int) -> list[int]:
    """Greedy decoding through ``step(token) -> logits`` (a decoder holding its own state): the prompt fed, then
    ``n_new`` tokens, each the argmax of the logits before it."""
    logits = None
    for t in prompt:
        logits = step(int(t))
    out = []
    for _ in range(n_new):
        tok = int(np.argmax(np.asarray(logits).reshape(-1)))
        out.append(tok)
        logits = step(tok)
    return out


@torch.no_grad()
def torch_greedy(model: nn.Module, prompt, n_new: int) -> list[int]:
    """Greedy decoding with the torch module's own ``step`` (the reference for ``step_greedy_ort``)."""
    state = model.zero_state(1)

    def step(tok):
        nonlocal state
        logits, state = model.step(torch.tensor([tok]), state)
        return logits[0].numpy()

    return greedy_tokens(step, prompt, n_new)
