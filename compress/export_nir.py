"""``export-nir``: a dense ReLU network (torch) -> a NIR graph of integrate-and-fire neurons (rate coding).

NIR has no ReLU node, so the network is written the way ANN-to-SNN conversion maps it: each
``Linear + ReLU`` becomes ``Affine -> IF`` whose spike rate stands for the activation, and the last
``Linear`` becomes ``Affine -> I`` (an integrator: its voltage sums the logits over the window).
With ``theta_l`` the calibration activations' ``percentile`` of layer ``l``, the IF neuron's threshold
is ``theta_l`` (so its rate, in spikes per step, is about ``relu(.) / theta_l`` and at most 1) and the
next layer's weights are multiplied by ``theta_l`` (a spike carries ``theta_l`` of activation);
``r = 1 / dt`` makes one Euler step add the input once. Any NIR tool (and ``edgesmith deploy
graph.nir``) can run the graph; ``graph.metadata["edgesmith"]`` records the thresholds, ``dt``,
the window length the rates were set for, and the Sigma-Delta mapping of the same network.
The pass reads the file back with ``nir.read`` and reports how closely the graph's float semantics
(forward Euler, ``compress/nir_graph.py``) follow the torch model on the calibration data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.common.checks import is_int
from edgesmith.compress.base import Artifact, LayerReport, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.compress.export_netx import linear_relu_layers


@dataclass
class ExportNirConfig(PassConfig):
    """``steps``: time steps per sample the rates are meant for; ``percentile`` of the calibration
    activations that sets each threshold; ``dt``: the Euler step written into the graph (seconds)."""

    kind: ClassVar[str] = "export-nir"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "nir"
    steps: int = 32
    percentile: float = 99.9
    dt: float = 1e-4

    def validate(self):
        if not is_int(self.steps, 1, 4096):
            raise EdgesmithError(f"export-nir: steps {self.steps!r} is not a whole number in 1..4096.", "use e.g. steps=32.")
        if not (isinstance(self.percentile, (int, float)) and 50 <= self.percentile <= 100):
            raise EdgesmithError(f"export-nir: percentile {self.percentile!r} is outside 50..100.",
                                 "use e.g. percentile=99.9.")
        if not (isinstance(self.dt, (int, float)) and math.isfinite(self.dt) and self.dt > 0):
            raise EdgesmithError(f"export-nir: dt {self.dt!r} is not a positive number.", "use e.g. dt=1e-4.")


def to_nir_graph(module, calibration: np.ndarray, config: ExportNirConfig):
    """The NIR graph and the per-layer thresholds of the rate-coded network."""
    import nir

    layers = linear_relu_layers(module)
    if layers[-1].relu:
        raise EdgesmithError("export-nir: the network ends with a ReLU; the readout must be a plain Linear layer.",
                             "drop the last ReLU (the logits are read from an integrator).")
    if any(not lyr.relu for lyr in layers[:-1]):
        raise EdgesmithError("export-nir: a hidden Linear layer has no ReLU after it.",
                             "use Linear + ReLU pairs with one Linear readout.")
    x = np.asarray(calibration, np.float64).reshape(len(calibration), -1)
    nodes = {"input": nir.Input(input_type={"input": np.array([x.shape[1]])})}
    edges, prev, y, scale, thetas = [], "input", x, 1.0, []
    for i, lyr in enumerate(layers):
        w = lyr.linear.weight.detach().double().numpy()
        b = lyr.linear.bias.detach().double().numpy() if lyr.linear.bias is not None else np.zeros(w.shape[0])
        if w.shape[1] != y.shape[1]:
            raise EdgesmithError(f"export-nir: layer {lyr.name!r} expects {w.shape[1]} inputs but gets {y.shape[1]}.",
                                 "check that the calibration data matches the model's input size.")
        n = w.shape[0]
        aff, neuron = f"fc{i}", f"{'if' if lyr.relu else 'readout'}{i}"
        nodes[aff] = nir.Affine(weight=w * scale, bias=b)
        y = y @ w.T + b
        if lyr.relu:
            y = np.maximum(y, 0.0)
            theta = float(np.percentile(y, config.percentile)) if np.any(y > 0) else 1.0
            theta = theta if theta > 0 else float(y.max()) or 1.0
            thetas.append(theta)
            nodes[neuron] = nir.IF(r=np.full(n, 1.0 / config.dt), v_threshold=np.full(n, theta), v_reset=np.zeros(n))
            scale = theta
        else:
            nodes[neuron] = nir.I(r=np.full(n, 1.0 / config.dt))
        edges += [(prev, aff), (aff, neuron)]
        prev = neuron
    nodes["output"] = nir.Output(output_type={"output": np.array([y.shape[1]])})
    edges.append((prev, "output"))
    meta = {"edgesmith": {"source": "export-nir", "coding": "rate: IF spikes per step ~ relu / threshold, reset to 0",
                          "thresholds": thetas, "dt": config.dt, "steps": config.steps, "percentile": config.percentile,
                          "layer_names": [lyr.name for lyr in layers],
                          "readout": "integrator voltage = sum of the logits over the window (steps + 1 steps)"}}
    return nir.NIRGraph(nodes=nodes, edges=edges, metadata=meta), thetas


@register_pass(ExportNirConfig)
def _export_nir(artifact: Artifact, config: ExportNirConfig, ctx: PassContext) -> PassResult:
    import nir

    from edgesmith.compress.nir_graph import load_chain, simulate_float

    calib = np.asarray(ctx.calibration_checked("calibration data (sets the IF thresholds)"), np.float64)
    calib = calib.reshape(len(calib), -1)
    graph, thetas = to_nir_graph(artifact.module, calib, config)
    out = ctx.workdir / "model.nir"
    with atomic_path(out, force=True) as tmp:
        nir.write(str(tmp), graph)
    chain = load_chain(out)  # read back as any NIR consumer would
    import torch

    with torch.inference_mode():
        ref = artifact.module(torch.as_tensor(calib[:128], dtype=torch.float32)).double().numpy()
    sim, stats = simulate_float(chain, calib[:128], config.dt, config.steps)
    agree = float(np.mean(sim.argmax(1) == ref.argmax(1)))
    layers = linear_relu_layers(artifact.module)
    reports = [LayerReport(name=lyr.name, action="converted", bits_per_weight=32.0,
                           n_params=int(lyr.linear.weight.numel()),
                           error={"threshold": thetas[i]} if i < len(thetas) else {},
                           reason="Affine + IF (rate coded)" if lyr.relu else "Affine + I (integrator readout)")
               for i, lyr in enumerate(layers)]
    notes = [f"rate-coded NIR graph, {config.steps} steps per sample at dt {config.dt:g} s; read back with nir.read: "
             f"argmax agreement with the torch model {agree:.3f} on {len(ref)} calibration samples; hidden spikes per "
             f"sample {[round(s, 1) for s in stats['spikes_per_sample'][:-1]]}"]
    new = Artifact("nir", path=out, meta={**artifact.meta, "nir": {"dt": config.dt, "steps": config.steps}})
    report = PassReport(config.to_dict(), "torch", "nir", artifact.size_bytes(), new.size_bytes(), bits_per_weight=32.0,
                        layers=reports, notes=notes, extra={"thresholds": thetas, "argmax_agreement": agree})
    return PassResult(new, report)
