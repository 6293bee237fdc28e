"""Recurrent step graphs: models whose state travels as inputs and outputs (RNN cells, RWKV/S5 steps,
streaming audio models).

An artifact of this shape declares it in ``meta["recurrent"]``::

    {"input": "token",                       # the per-step input
     "output": "logits",                     # the per-step output
     "state": [["att_x", "att_x_out"], ...], # (state input, the output that feeds it next step)
     "state_shapes": {"att_x": [2, 128], ...}, # per-sequence shape of each state (batch first)
     "state_dtypes": {"att_x": "float32", ...}}

``run_sequence`` turns a runtime loaded with such an artifact into a whole-sequence function: inputs
(batch, time, ...) -> outputs (batch, time, ...), the state starting at zeros and fed back each step.
Every state is batch first, so the same loop serves any batch size.
"""
from __future__ import annotations

import numpy as np

from edgesmith.common import EdgesmithError


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


def zero_state(spec: dict, batch: int) -> dict[str, np.ndarray]:
    dtypes = spec.get("state_dtypes", {})
    return {name: np.zeros((batch, *spec["state_shapes"][name]), np.dtype(dtypes.get(name, "float32")))
            for name, _ in spec["state"]}


def step_feed(spec: dict, x_t: np.ndarray, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feed of one step: the step input plus the current state (and any constant extra inputs)."""
    return {spec["input"]: x_t, **state}


def run_sequence(rt, spec: dict, x: np.ndarray) -> tuple[np.ndarray, dict]:
    """Feed ``x`` (batch, time, ...) one step at a time; returns (outputs (batch, time, ...), summed stats)."""
    x = np.asarray(x)
    if x.ndim < 2:
        raise EdgesmithError(f"a recurrent model takes (batch, time, ...) sequences, got shape {x.shape}.",
                             "give whole sequences; each is fed one step at a time.")
    state = zero_state(spec, x.shape[0])
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


def timing_feed(spec: dict, x: np.ndarray) -> dict[str, np.ndarray]:
    """What one timed call of a step graph gets: the first step of ``x`` and a zero state."""
    x = np.asarray(x)
    return step_feed(spec, x[:, 0], zero_state(spec, x.shape[0]))
