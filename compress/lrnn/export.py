"""What standard formats can hold of the S5 denoiser: a netx HDF5 file and a NIR graph.

netx (lava-dl's HDF5 exchange format) knows input, dense, conv and recurrent-dense layers with CUBA
or Sigma-Delta neurons; it has no complex recurrence, no gating product and no requantizing
neuron. ``write_netx_parts`` therefore writes the dense layers at the two ends as two netx networks
(``export-netx``'s mapping: the encoder with Sigma-Delta ReLU neurons, the decoder as a Sigma output
layer), which lava-dl's netx loads and Lava runs bit-exact with ``netx-ref``.

NIR is continuous-time and has no complex or SSM node, but a diagonal complex recurrence is an
LI population plus a recurrent edge: with time measured in steps, mode ``n`` is
``d[xr, xi]/dt = a [xr, xi] + b [[0, -1], [1, 0]] [xr, xi] + B u`` with ``a + i b = lambda dt``.
``to_nir`` writes, per S5 layer: ``Affine`` (pre-norm folded into ``B dt``, real then imaginary
rows) -> ``LI`` (``tau = -1 / a``, ``r = tau``, ``v_leak = 0``) with a recurrent ``Linear`` of 2x2
rotation blocks, -> ``Linear`` ``[2 Re C, -2 Im C]`` -> output, and the ``D`` skip as a diagonal
``Affine`` into the same output. Real poles (``b = 0``) reduce to plain LI. The GLU, encoder ReLU
and decoder stay outside (NIR has no product or ReLU node); ``nir_ssm_step`` discretizes the graph
read back (exact 2x2 matrix exponential, zero-order hold) so a test can compare it with the model.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from edgesmith.common import atomic_path
from edgesmith.models.lrnn.s5 import S5Denoiser

# --- netx -----------------------------------------------------------------------------------------


def block_inputs(model: S5Denoiser, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(encoder outputs, decoder inputs) of the float model on ``feats`` (clips, T, 257), frames flattened."""
    with torch.no_grad():
        f = torch.as_tensor(np.asarray(feats), dtype=torch.float32)
        h = torch.relu(f @ model.enc.weight.T + model.enc.bias)
        enc = h.reshape(-1, h.shape[-1]).double().numpy()
        for blk in model.blocks:
            h = blk(h)
    return enc, h.reshape(-1, h.shape[-1]).double().numpy()


def write_netx_parts(model: S5Denoiser, feats: np.ndarray, folder: Path, n_calibration: int = 2048) -> dict:
    """The encoder (Linear + ReLU: Sigma-Delta neurons) and the decoder (Linear: a Sigma output layer) as two
    netx networks lava-dl's ``netx.hdf5.Network`` loads, made by ``export-netx``'s own mapping.

    The S5 blocks between them (complex recurrence, GLU product) have no netx layer, so the two files are
    separate networks; each is checked against the float layer it came from on the calibration frames
    (output SQNR), and its Lava run against ``netx-ref`` by the caller."""
    from edgesmith.compress.export_netx import (
        ExportNetxConfig,
        choose_network,
        write_netx,
    )
    from torch import nn

    model = model.eval()
    frames = np.asarray(feats, np.float64).reshape(-1, np.asarray(feats).shape[-1])
    pick = np.random.default_rng(0).permutation(len(frames))[:n_calibration]
    _, dec_in = block_inputs(model, feats)
    parts = {"encoder": (nn.Sequential(model.enc, nn.ReLU()), frames[pick]),
             "decoder": (nn.Sequential(model.dec), dec_in[pick])}
    out = {}
    for name, (module, calib) in parts.items():
        layers, fl, cand, net, db, _ = choose_network(module.float(), calib, ExportNetxConfig())
        path = Path(folder) / f"{name}.net"
        write_netx(path, cand, layers, fl, net)
        out[name] = {"path": str(path), "calibration_output_sqnr_db": float(db), "frames": int(len(calib))}
    return out


# --- NIR ------------------------------------------------------------------------------------------


def _ssm_parts(block) -> dict:
    bn, ssm = block.norm, block.ssm
    with torch.no_grad():
        a = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).double().numpy()
        c = (bn.bias.double() - bn.running_mean.double() * torch.from_numpy(a)).numpy()
        lam = (torch.complex(-torch.exp(ssm.log_neg_re), ssm.im).to(torch.complex128)).numpy()
        dt = torch.exp(ssm.log_dt).double().numpy()
        b = (ssm.B_re.double() + 1j * ssm.B_im.double()).numpy()
        return {"a": a, "c": c, "lam_dt": lam * dt, "b_dt": b * dt[:, None], "C": (ssm.C_re.double() + 1j *
                ssm.C_im.double()).numpy(), "D": ssm.D.double().numpy()}


def to_nir(model: S5Denoiser):
    """The whole denoiser as one NIRGraph: every linear map and recurrence as nodes, the operations NIR
    has no node for (ReLU, the GLU's product and sigmoid, the residual sum) named in the metadata.

    Nodes: ``input`` -> ``enc`` (Affine); per block ``s5_l_B`` (Affine, norm folded in) -> ``s5_l_LI``
    with the recurrent ``s5_l_rot``, -> ``s5_l_C`` and the skip ``s5_l_D`` into ``s5_l_y`` (an identity
    Linear: NIR sums a node's inputs), -> ``s5_l_glu_a`` and ``s5_l_glu_b`` (Affine); ``dec`` (Affine)
    -> ``output``. Edges are drawn only where NIR's semantics are exact; ``metadata["edgesmith"]["between"]``
    (JSON text: HDF5 attributes hold no list of records) lists, in order, each step with the nodes it reads and
    feeds and the operation NIR lacks.
    """
    import nir

    model = model.eval()
    h = model.cfg.d_model
    with torch.no_grad():
        nodes = {"input": nir.Input({"input": np.array([model.enc.in_features])}),
                 "enc": nir.Affine(model.enc.weight.double().numpy(), model.enc.bias.double().numpy()),
                 "dec": nir.Affine(model.dec.weight.double().numpy(), model.dec.bias.double().numpy()),
                 "output": nir.Output({"output": np.array([model.dec.out_features])})}
    edges = [("input", "enc"), ("dec", "output")]
    between = [{"reads": ["enc"], "feeds": ["s5_0_B", "s5_0_D"], "op": "relu", "residual": "h = relu(enc)"}]
    for l, blk in enumerate(model.blocks):
        p = _ssm_parts(blk)
        n, _ = p["b_dt"].shape
        bw = p["b_dt"] * p["a"][None, :]
        bb = p["b_dt"] @ p["c"]
        re, im = p["lam_dt"].real, p["lam_dt"].imag
        tau = np.concatenate([-1.0 / re, -1.0 / re])
        rot = np.zeros((2 * n, 2 * n))
        rot[np.arange(n), n + np.arange(n)] = -im
        rot[n + np.arange(n), np.arange(n)] = im
        pre = f"s5_{l}"
        nodes[f"{pre}_B"] = nir.Affine(np.vstack([bw.real, bw.imag]), np.concatenate([bb.real, bb.imag]))
        nodes[f"{pre}_LI"] = nir.LI(tau=tau, r=tau.copy(), v_leak=np.zeros(2 * n))
        nodes[f"{pre}_rot"] = nir.Linear(rot)
        nodes[f"{pre}_C"] = nir.Linear(np.hstack([2 * p["C"].real, -2 * p["C"].imag]))
        nodes[f"{pre}_D"] = nir.Affine(np.diag(p["D"] * p["a"]), p["D"] * p["c"])
        nodes[f"{pre}_y"] = nir.Linear(np.eye(h))
        with torch.no_grad():
            nodes[f"{pre}_glu_a"] = nir.Affine(blk.w1.weight.double().numpy(), blk.w1.bias.double().numpy())
            nodes[f"{pre}_glu_b"] = nir.Affine(blk.w2.weight.double().numpy(), blk.w2.bias.double().numpy())
        edges += [(f"{pre}_B", f"{pre}_LI"), (f"{pre}_LI", f"{pre}_rot"), (f"{pre}_rot", f"{pre}_LI"),
                  (f"{pre}_LI", f"{pre}_C"), (f"{pre}_C", f"{pre}_y"), (f"{pre}_D", f"{pre}_y"),
                  (f"{pre}_y", f"{pre}_glu_a"), (f"{pre}_y", f"{pre}_glu_b")]
        nxt = [f"s5_{l + 1}_B", f"s5_{l + 1}_D"] if l + 1 < len(model.blocks) else ["dec"]
        between.append({"reads": [f"{pre}_glu_a", f"{pre}_glu_b"], "feeds": nxt, "op": "h + a * sigmoid(b)",
                        "residual": "h is this block's input"})
    meta = {"edgesmith": {"model": "S5 denoiser (LRNN)", "time_unit": "one 8 ms STFT step (lambda and B scaled by dt)",
                          "between": json.dumps(between), "output": "mask logits (the runtime applies a sigmoid)"}}
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False, metadata=meta)


def write_nir(model: S5Denoiser, path: Path, force: bool = True) -> Path:
    import nir

    with atomic_path(path, force=force) as tmp:
        nir.write(str(tmp), to_nir(model))
    return Path(path)


def nir_ssm_step(graph, layer: int, u: np.ndarray) -> np.ndarray:
    """Run layer ``layer``'s SSM from a NIR graph, discretized by ZOH with step 1: u (T, H) -> y (T, H)."""
    pre = f"s5_{layer}"
    B, li, rot = graph.nodes[f"{pre}_B"], graph.nodes[f"{pre}_LI"], graph.nodes[f"{pre}_rot"]
    C, D = graph.nodes[f"{pre}_C"], graph.nodes[f"{pre}_D"]
    n = len(li.tau) // 2
    lam = -1.0 / np.asarray(li.tau[:n]) + 1j * np.asarray(rot.weight)[n + np.arange(n), np.arange(n)]
    lam_bar = np.exp(lam)
    zoh = (lam_bar - 1) / lam
    w = np.asarray(B.weight)
    bw, bb = w[:n] + 1j * w[n:], np.asarray(B.bias)[:n] + 1j * np.asarray(B.bias)[n:]
    x = np.zeros(n, complex)
    ys = []
    for t in range(len(u)):
        x = lam_bar * x + zoh * (bw @ u[t] + bb)
        ys.append(np.asarray(C.weight) @ np.concatenate([x.real, x.imag]) + np.asarray(D.weight) @ u[t]
                  + np.asarray(D.bias))
    return np.array(ys)


def nir_denoiser_forward(graph, feats: np.ndarray) -> np.ndarray:
    """Run the whole denoiser from its NIR graph read back: (T, 257) features -> (T, 257) mask logits.

    Linear nodes and the recurrences (ZOH, ``nir_ssm_step``) come from the graph; the operations NIR lacks
    are applied as its ``metadata["edgesmith"]["between"]`` names them."""
    nodes = graph.nodes
    meta = graph.metadata["edgesmith"]

    def affine(name, x):
        node = nodes[name]
        out = x @ np.asarray(node.weight).T
        return out + np.asarray(node.bias) if hasattr(node, "bias") else out

    h = np.maximum(affine("enc", feats), 0.0)  # between[0]: relu
    n_blocks = len(json.loads(meta["between"])) - 1
    for l in range(n_blocks):
        y = nir_ssm_step(graph, l, h)
        a, b = affine(f"s5_{l}_glu_a", y), affine(f"s5_{l}_glu_b", y)
        h = h + a / (1.0 + np.exp(-b))  # between[l + 1]: h + a * sigmoid(b)
    return affine("dec", h)

