"""Recurrent step graphs: models whose state travels as inputs and outputs (RNN cells, RWKV/S5 steps,
streaming audio models).

An artifact of this shape declares it in ``meta["recurrent"]``::

    {"input": "token",                       # the per-step input
     "output": "logits",                     # the per-step output
     "state": [["att_x", "att_x_out"], ...], # (state input, the output that feeds it next step)
     "state_shapes": {"att_x": [2, 128], ...}, # per-sequence shape of each state
     "state_dtypes": {"att_x": "float32", ...},
     "state_batch_axes": {"h": 1, ...},       # optional: where the batch goes (default 0, batch first)
     "initial_state": true}                  # optional: the per-sequence starting state is in
                                             # MODEL_PATH + ".init.npz" (else zeros)

``run_sequence`` turns a runtime loaded with such an artifact into a whole-sequence function: inputs
(batch, time, ...) -> outputs (batch, time, ...), the state starting at zeros and fed back each step.
Every state is batch first, so the same loop serves any batch size.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.compress.base import INIT_SUFFIX


def recurrent_spec(meta: dict) -> dict | None:
    """The ``recurrent`` entry of an artifact's meta, checked; None for a plain (stateless) graph."""
    spec = meta.get("recurrent")
    if spec is None:
        return None
    for key in ("input", "output", "state", "state_shapes"):
        if key not in spec:
            raise EdgesmithError(f"the recurrent description of this model lacks {key!r}.",
                                 "declare input, output, state pairs and state shapes (runtimes.stateful).")
    return spec


def zero_state(spec: dict, batch: int, model_path: Path | None = None) -> dict[str, np.ndarray]:
    """The starting state of ``batch`` sequences: zeros, or the model's own initial state when it has one
    (``model_path`` + ``.init.npz``)."""
    dtypes, axes = spec.get("state_dtypes", {}), spec.get("state_batch_axes", {})
    initial = _initial_state(spec, model_path)
    out = {}
    for name, _ in spec["state"]:
        dtype = np.dtype(dtypes.get(name, "float32"))
        one = initial[name].astype(dtype) if initial else np.zeros(spec["state_shapes"][name], dtype)
        axis = axes.get(name, 0)
        out[name] = np.ascontiguousarray(np.repeat(np.expand_dims(one, axis), batch, axis=axis))
    return out


def _initial_state(spec: dict, model_path: Path | None) -> dict | None:
    if not spec.get("initial_state"):
        return None
    if model_path is None:
        raise EdgesmithError("the model starts from a trained initial state but its file is unknown here.",
                             "load the step graph from its file (the state is in FILE.init.npz beside it).")
    path = Path(str(model_path) + INIT_SUFFIX)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except OSError:
        raise EdgesmithError(f"the model's initial state file {path} is missing.",
                             "keep the .npz the export wrote beside the model.") from None


def step_feed(spec: dict, x_t: np.ndarray, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feed of one step: the step input plus the current state (and any constant extra inputs)."""
    return {spec["input"]: x_t, **state}


def _model_path(rt) -> Path | None:
    path = getattr(getattr(rt, "artifact_", None), "path", None)
    return None if path is None else Path(path)


def run_sequence(rt, spec: dict, x: np.ndarray) -> tuple[np.ndarray, dict]:
    """Feed ``x`` (batch, time, ...) one step at a time; returns (outputs (batch, time, ...), summed stats)."""
    x = np.asarray(x)
    if x.ndim < 2:
        raise EdgesmithError(f"a recurrent model takes (batch, time, ...) sequences, got shape {x.shape}.",
                             "give whole sequences; each is fed one step at a time.")
    fixed = spec.get("batch")
    if fixed and x.shape[0] != fixed:  # a graph exported with a static batch (a decode graph) takes slices
        if x.shape[0] % fixed:
            raise EdgesmithError(f"the step graph was exported for batches of {fixed} but got {x.shape[0]} sequences.",
                                 f"give a multiple of {fixed} sequences, or export it with a dynamic batch.")
        parts = [run_sequence(rt, spec, x[i:i + fixed]) for i in range(0, x.shape[0], fixed)]
        return (np.concatenate([p[0] for p in parts]),
                {**parts[-1][1], "wall_s": sum(p[1]["wall_s"] for p in parts)})
    state = zero_state(spec, x.shape[0], _model_path(rt))
    outs, wall = [], 0.0
    stats: dict = {}
    for t in range(x.shape[1]):
        res = rt.run(step_feed(spec, x[:, t], state))
        named = res.named or {}
        missing = [o for _, o in spec["state"] if o not in named] + ([spec["output"]] if spec["output"] not in named else [])
        if missing:
            raise EdgesmithError(f"the step graph did not return {', '.join(missing)}.",
                                 "name the state outputs as the recurrent description says.")
        outs.append(named[spec["output"]])
        state = {i: named[o] for i, o in spec["state"]}
        wall += res.stats.get("wall_s", 0.0)
        stats = res.stats
    return np.stack(outs, axis=1), {**stats, "wall_s": wall, "steps": int(x.shape[1])}


def timing_feed(spec: dict, x: np.ndarray, model_path: Path | None = None) -> dict[str, np.ndarray]:
    """What one timed call of a step graph gets: the first step of ``x`` and the starting state."""
    x = np.asarray(x)
    return step_feed(spec, x[:, 0], zero_state(spec, x.shape[0], model_path))


def step_feeds(rt, spec: dict, x: np.ndarray, limit: int | None = None) -> dict[str, np.ndarray]:
    """Every step's feed of sequences ``x`` (batch, time, ...) with the state the model really reaches,
    stacked: what a static quantizer calibrates a step graph on (``limit`` caps the steps kept)."""
    x = np.asarray(x)
    state = zero_state(spec, x.shape[0], _model_path(rt))
    axes = spec.get("state_batch_axes", {})
    feeds: dict[str, list] = {}
    for t in range(x.shape[1]):
        feed = step_feed(spec, x[:, t], state)
        for k, v in feed.items():
            feeds.setdefault(k, []).append(np.moveaxis(v, axes.get(k, 0), 0))
        named = rt.run(feed).named
        state = {i: named[o] for i, o in spec["state"]}
    out = {k: np.concatenate(v) for k, v in feeds.items()}
    out = {k: np.moveaxis(v, 0, axes.get(k, 0)) for k, v in out.items()}
    if limit is not None:
        out = {k: np.take(v, np.arange(min(limit, v.shape[axes.get(k, 0)])), axis=axes.get(k, 0)) for k, v in out.items()}
    return out
