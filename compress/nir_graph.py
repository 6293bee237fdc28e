"""NIR graphs (the Neuromorphic Intermediate Representation, ``nir`` package): read, check, simulate in float.

A NIR file is a graph of continuous-time nodes written by snnTorch, Norse, Sinabs, Rockpool,
SpikingJelly or the ``nir`` package itself. This module turns the graphs edgesmith can deploy into a
chain of layers, each one synaptic transform followed by one neuron node. Transforms are ``Affine``,
``Linear``, ``Conv1d``, ``Conv2d``, ``SumPool2d`` and ``AvgPool2d``: each is a linear map of the
flattened (channel-major, as PyTorch and NIR flatten) input, so it is lowered to its matrix (a
convolution's is sparse: Lava stores only its nonzero synapses), ``Flatten`` nodes only reshape, and
consecutive transforms compose into one. Neuron nodes:

* ``LIF``:  tau dv/dt = (v_leak - v) + r I, spike when v > v_threshold, then v = v_reset
* ``CubaLIF``: tau_syn dI/dt = -I + w_in S, then the LIF equation driven by I
* ``IF``: dv/dt = r I (spike and reset as LIF);  ``LI``: LIF without spikes;  ``I``: dv/dt = r I, no spikes

Time is discretised with forward Euler at the step ``dt`` (the exporting library's; snnTorch exports
with dt = 1e-4 s, so tau = dt / (1 - beta) and r = tau / dt give back its ``beta * v + I``). Each
sample is presented as a window of ``steps + 1`` steps with the state reset at its start: one step
with zero input (biases only), then ``steps`` steps with the sample as a constant input current. This
is the schedule the Lava network runs (``compress/import_nir.py``), so float and fixed point are
compared on the same terms. The output is the last layer's spike count over the window (spiking
neurons) or its membrane potential at the last step (``LI``, ``I``).

Anything else (delays, thresholds, scales, recurrent edges, branches, ``v_reset`` other than 0) is
refused by node name before any work.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgesmith.common import EdgesmithError

NEURONS = ("LIF", "CubaLIF", "IF", "LI", "I")
SPIKING = ("LIF", "CubaLIF", "IF")
TRANSFORMS = ("Affine", "Linear", "Conv1d", "Conv2d", "SumPool2d", "AvgPool2d")
PASSTHROUGH = ("Input", "Output", "Flatten")
FIX = "deploy a feed-forward chain of Affine/Linear transforms and LIF, CubaLIF, IF, LI or I neurons."


@dataclass
class NirLayer:
    """One synaptic transform and the neuron node it drives, with per-neuron parameters as float arrays."""

    name: str  # the neuron node's name in the graph
    neuron: str  # one of NEURONS
    weight: np.ndarray  # (n_out, n_in)
    bias: np.ndarray  # (n_out,)
    params: dict = field(default_factory=dict)  # tau / tau_syn / tau_mem / r / v_leak / v_threshold / w_in, (n_out,)

    @property
    def n_out(self) -> int:
        return int(self.weight.shape[0])

    @property
    def spiking(self) -> bool:
        return self.neuron in SPIKING


@dataclass
class NirChain:
    layers: list[NirLayer]
    n_inputs: int
    path: str = ""
    input_shape: tuple = ()  # the Input node's shape (e.g. channels, height, width); inputs are flattened from it

    @property
    def readout(self) -> str:
        return "spikes" if self.layers[-1].spiking else "voltage"


def _bad(path, problem: str, fix: str = FIX) -> EdgesmithError:
    return EdgesmithError(f"{path}: {problem}", fix)


def read_graph(path: str | Path):
    import nir

    path = Path(path)
    try:
        # edgesmith checks the shapes of what it deploys itself; nir's inference fails on some valid exports
        return nir.read(str(path), type_check=False)
    except Exception as e:  # h5py / nir raise many kinds; the user needs the file named
        raise _bad(path, f"is not a readable NIR graph ({type(e).__name__}: {e}).",
                   "pass a .nir file written by nir.write (snnTorch export_to_nir, Norse, Sinabs, ...).") from None


def _arr(node, key: str, n: int, path, name: str) -> np.ndarray:
    v = np.asarray(getattr(node, key), np.float64)
    if v.size == 1:
        v = np.full(n, float(v.reshape(-1)[0]))
    v = v.reshape(-1)
    if v.size != n:
        raise _bad(path, f"node {name!r}: {key} has {v.size} values for {n} neurons.")
    if not np.all(np.isfinite(v)):
        raise _bad(path, f"node {name!r}: {key} is not finite.", "re-export the graph.")
    return v


def _neuron_params(node, kind: str, n: int, path, name: str) -> dict:
    keys = {"LIF": ("tau", "r", "v_leak", "v_threshold"), "CubaLIF": ("tau_syn", "tau_mem", "r", "v_leak",
                                                                       "v_threshold", "w_in"),
            "IF": ("r", "v_threshold"), "LI": ("tau", "r", "v_leak"), "I": ("r",)}[kind]
    p = {k: _arr(node, k, n, path, name) for k in keys}
    if kind in SPIKING:
        reset = getattr(node, "v_reset", None)
        if reset is not None and np.any(np.asarray(reset) != 0):
            raise _bad(path, f"node {name!r} ({kind}) resets to v_reset != 0; Lava's LIF resets to 0.",
                       "export the neurons with v_reset = 0 (a reset-to-zero mechanism).")
        if np.any(p["v_threshold"] <= 0):
            raise _bad(path, f"node {name!r} ({kind}) has a threshold <= 0.", "use positive thresholds.")
    for k in ("tau", "tau_syn", "tau_mem"):
        if k in p and np.any(p[k] <= 0):
            raise _bad(path, f"node {name!r} ({kind}) has {k} <= 0.", "use positive time constants.")
    return p


def to_chain(graph, path="graph") -> NirChain:
    """The graph as a chain of layers; refuses, by node name and type, what edgesmith cannot deploy."""
    nodes = graph.nodes
    kinds = {name: type(node).__name__ for name, node in nodes.items()}
    known = set(NEURONS) | set(TRANSFORMS) | set(PASSTHROUGH)
    unsupported = [f"{n!r} ({k})" for n, k in kinds.items() if k not in known]
    if unsupported:
        raise _bad(path, f"has nodes edgesmith cannot deploy: {', '.join(sorted(unsupported))}; it runs Affine, "
                   f"Linear, Flatten, LIF, CubaLIF, IF, LI and I nodes in a feed-forward chain.",
                   "convolution, pooling, delay and other nodes are not supported yet: " + FIX)
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    pred: dict[str, list[str]] = {n: [] for n in nodes}
    for src, dst in graph.edges:
        if src not in nodes or dst not in nodes:
            raise _bad(path, f"has an edge {src!r} -> {dst!r} to a node that is not in the graph.", "re-export it.")
        succ[src].append(dst), pred[dst].append(src)
    inputs = [n for n, k in kinds.items() if k == "Input"]
    if len(inputs) != 1:
        raise _bad(path, f"has {len(inputs)} Input nodes; edgesmith deploys graphs with exactly one.")
    order, seen, cur = [], set(), inputs[0]
    while True:
        if cur in seen:
            raise _bad(path, f"has a recurrent edge back to {cur!r} ({kinds[cur]}); recurrent NIR graphs are not "
                       "supported yet.")
        seen.add(cur), order.append(cur)
        if len(succ[cur]) > 1:
            raise _bad(path, f"node {cur!r} feeds {len(succ[cur])} nodes ({', '.join(succ[cur])}); branches are not "
                       "supported.")
        if not succ[cur]:
            break
        nxt = succ[cur][0]
        if len(pred[nxt]) > 1:
            raise _bad(path, f"node {nxt!r} has {len(pred[nxt])} inputs; merges are not supported.")
        cur = nxt
    if kinds[order[-1]] != "Output":
        raise _bad(path, f"its chain from the input ends at {order[-1]!r} ({kinds[order[-1]]}), not at an Output node.")
    missing = set(nodes) - seen
    if missing:
        raise _bad(path, f"has nodes off the input-output chain: {', '.join(sorted(missing))}.")
    in_type = getattr(nodes[inputs[0]], "input_type", None) or {}
    shape = tuple(int(d) for d in np.asarray(next(iter(in_type.values()))).reshape(-1)) if in_type else None
    input_shape = shape
    n_in = int(np.prod(shape)) if shape else None
    layers: list[NirLayer] = []
    w = b = None
    for name in order[1:-1]:
        node, kind = nodes[name], kinds[name]
        if kind == "Flatten":
            shape = (int(np.prod(shape)),) if shape is not None else None  # the vectors are flat already
            continue
        if kind in TRANSFORMS:
            if shape is None and kind in ("Affine", "Linear"):
                shape = (int(np.asarray(node.weight).shape[-1]),)
            if shape is None:
                raise _bad(path, f"node {name!r} ({kind}): the Input node does not give the input's shape.",
                           "write the Input node with its input_type shape.")
            wn, bn, shape = _lower(node, kind, shape, path, name)
            if not (np.all(np.isfinite(wn)) and np.all(np.isfinite(bn))):
                raise _bad(path, f"node {name!r} has non-finite weights.", "re-export the graph.")
            if w is None:
                w, b = wn, bn
            else:  # two transforms in a row compose into one
                w, b = wn @ w, wn @ b + bn
            continue
        if w is None:
            raise _bad(path, f"neuron node {name!r} ({kind}) is not driven by an Affine or Linear node.")
        expect = layers[-1].n_out if layers else n_in
        if expect is not None and w.shape[1] != expect:
            raise _bad(path, f"the transform before {name!r} takes {w.shape[1]} inputs but gets {expect}.")
        if shape is None:
            shape = (w.shape[0],)
        layers.append(NirLayer(name, kind, w, b, _neuron_params(node, kind, w.shape[0], path, name)))
        w = b = None
    if w is not None:
        raise _bad(path, "ends with a transform after the last neuron; edgesmith reads the last neuron layer.",
                   "end the graph with a neuron node (LI for a membrane readout).")
    if not layers:
        raise _bad(path, "has no neuron layer.")
    hidden_nonspiking = [lyr.name for lyr in layers[:-1] if not lyr.spiking]
    if hidden_nonspiking:
        raise _bad(path, f"has non-spiking neurons before the last layer ({', '.join(hidden_nonspiking)}); only the "
                   "readout layer may be LI or I.", "use spiking neurons in hidden layers.")
    return NirChain(layers, int(layers[0].weight.shape[1]), str(path),
                    input_shape or (int(layers[0].weight.shape[1]),))


def _lower(node, kind: str, shape: tuple, path, name: str) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(matrix (out, in), bias (out,), output shape) of a linear node applied to an input of ``shape``."""
    from edgesmith.compress.lowering import conv_matrix, pool_matrix

    n_in = int(np.prod(shape))
    if kind in ("Affine", "Linear"):
        wn = np.asarray(node.weight, np.float64)
        if wn.ndim != 2 or wn.shape[1] != n_in:
            raise _bad(path, f"node {name!r} ({kind}) has weight {list(wn.shape)} for an input of {n_in} values.")
        bn = np.asarray(node.bias, np.float64).reshape(-1) if kind == "Affine" else np.zeros(wn.shape[0])
        if bn.size != wn.shape[0]:
            raise _bad(path, f"node {name!r} has {bn.size} biases for {wn.shape[0]} outputs.")
        return wn, bn, (wn.shape[0],)
    dims = 1 if kind == "Conv1d" else 2
    if len(shape) != dims + 1:
        raise _bad(path, f"node {name!r} ({kind}) gets an input of shape {list(shape)}; it needs (channels, "
                   f"{'length' if dims == 1 else 'height, width'}).", "give the Input node that shape.")
    if kind in ("Conv1d", "Conv2d"):
        try:
            return conv_matrix(node.weight, node.bias, shape, node.stride, node.padding, node.dilation, node.groups)
        except RuntimeError as e:
            raise _bad(path, f"node {name!r} ({kind}) does not fit an input of shape {list(shape)}: "
                       f"{str(e).splitlines()[0]}") from None
    m, out_shape = pool_matrix(shape, node.kernel_size, node.stride, node.padding, sum_pool=kind == "SumPool2d")
    return m, np.zeros(m.shape[0]), out_shape


def load_chain(path: str | Path) -> NirChain:
    return to_chain(read_graph(path), path)


def simulate_float(chain: NirChain, x: np.ndarray, dt: float, steps: int) -> tuple[np.ndarray, dict]:
    """(N, n_in) float inputs -> (N, n_out) outputs under forward Euler at ``dt`` on the window schedule."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    n = len(x)
    v = [np.zeros((n, lyr.n_out)) for lyr in chain.layers]
    cur = [np.zeros((n, lyr.n_out)) for lyr in chain.layers]
    out = np.zeros((n, chain.layers[-1].n_out))
    spikes = [0] * len(chain.layers)
    theta = [lyr.params["v_threshold"] if lyr.spiking else np.ones(lyr.n_out) for lyr in chain.layers]
    peak_v = [0.0] * len(chain.layers)  # largest |v| in units of each neuron's threshold (LI / I: of 1)
    for t in range(steps + 1):
        s = np.zeros_like(x) if t == 0 else x
        for i, lyr in enumerate(chain.layers):
            p = lyr.params
            drive = s @ lyr.weight.T + lyr.bias
            if lyr.neuron == "CubaLIF":
                cur[i] = cur[i] + dt / p["tau_syn"] * (p["w_in"] * drive - cur[i])
                v[i] = v[i] + dt / p["tau_mem"] * (p["v_leak"] - v[i] + p["r"] * cur[i])
            elif lyr.neuron in ("LIF", "LI"):
                v[i] = v[i] + dt / p["tau"] * (p["v_leak"] - v[i] + p["r"] * drive)
            else:  # IF, I
                v[i] = v[i] + dt * p["r"] * drive
            peak_v[i] = max(peak_v[i], float(np.abs(v[i] / theta[i]).max(initial=0.0)))
            if lyr.spiking:
                z = v[i] > p["v_threshold"]
                v[i] = np.where(z, 0.0, v[i])
                s = z.astype(np.float64)
                spikes[i] += int(z.sum())
            else:
                s = v[i]
        if chain.layers[-1].spiking:
            out += s
    if not chain.layers[-1].spiking:
        out = v[-1]
    return out, {"spikes_per_sample": [c / max(n, 1) for c in spikes], "peak_v": peak_v}
