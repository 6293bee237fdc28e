"""Run the fixed-point S5 denoiser as a Lava process graph in Loihi2SimCfg (fixed_pt models).

    .venv-lava/bin/python runtimes/lava_lrnn_worker.py IN.npz OUT.npz

Standalone for the Python 3.10 Lava env (numpy, scipy, lava only). IN.npz holds the network written by
``compress/lrnn/fixed.py`` plus ``inputs_int`` (T, 257) int64, one clip of quantized feature frames.

Graph (one frame enters per Lava time step; every Sparse adds one step of delay, and every path into
a process has the same delay, so the pipeline computes the frame-synchronous network exactly):

    source -> Sparse(We) -> Affine(enc, ReLU)
      per block: -> Sparse([Br; Bi; 2I]) -> ComplexRecurrence  (outputs [xr, xi, h])
                 -> Sparse([[Cr Ci 0]; [0 0 diag(D)]; [0 0 2I]]) -> Combine  (outputs [y, h])
                 -> Sparse([[W1 0]; [W2 0]; [0 2I]]) -> GluResidual  (gating by products, outputs h)
    -> Sparse(Wd) -> Affine(dec)  (the mask)

The custom processes below are fixed-point ``PyLoihiProcessModel``s with integer arithmetic only
(int64, saturating to 16-bit messages). A process at pipeline depth d starts at time step d + 1 and
sends zeros before, so bias terms do not leak into the recurrence before the first frame arrives.
Sparse weights are the stored even integers 2q (exact in Lava's 8-bit mixed-sign synapses), with
weight_exp 0; the identity pass-through synapses have weight 2 and are halved by the receiver.

OUT.npz: traces ``mask`` (T, 257), ``h_enc`` (T, H), ``x`` (L, T, 2N), ``y`` (L, T, H), ``h`` (L, T, H)
int64 (the parent computes activity counts from them with runtimes/lrnn_ref.activity_counts) and
``stats_json`` (wall times). On failure the last stderr line is the error and the exit code is 1.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings

import numpy as np
from lava.magma.core.decorator import implements, requires, tag
from lava.magma.core.model.py.model import PyLoihiProcessModel
from lava.magma.core.model.py.ports import PyInPort, PyOutPort
from lava.magma.core.model.py.type import LavaPyType
from lava.magma.core.process.ports.ports import InPort, OutPort
from lava.magma.core.process.process import AbstractProcess
from lava.magma.core.process.variable import Var
from lava.magma.core.resources import CPU
from lava.magma.core.sync.protocols.loihi_protocol import LoihiProtocol

ACT_MAX = 2 ** 15 - 1
# Lava looks for process models by importing every module beside this file; the edgesmith ones need
# Python 3.11 and fail harmlessly, which is not worth a warning per module and process
warnings.filterwarnings("ignore", message="Cannot import module")


def rq(a, m, s):
    return (a * np.int64(m) + (np.int64(1) << np.int64(s - 1))) >> np.int64(s)


def sat(v):
    return np.clip(v, -ACT_MAX, ACT_MAX)


def sigmoid_lut(g, lut, frac_bits):
    span, seg = 8 << frac_bits, 2 << frac_bits
    gc = np.clip(g, -span, span - 1) + span
    i = gc >> (frac_bits + 1)
    f = gc & (seg - 1)
    return lut[i] + (((lut[i + 1] - lut[i]) * f + (seg >> 1)) >> (frac_bits + 1))


# --- processes ------------------------------------------------------------------------------------


class _Neuron(AbstractProcess):
    """Common shape: one input port of n_in, one output port of n_out, a start step, int64 parameters."""

    def __init__(self, n_in: int, n_out: int, t_start: int, **params):
        super().__init__()
        self.a_in = InPort(shape=(n_in,))
        self.s_out = OutPort(shape=(n_out,))
        self.t_start = Var(shape=(1,), init=np.array([t_start]))
        for k, v in params.items():
            v = np.atleast_1d(np.asarray(v, np.int64))
            setattr(self, k, Var(shape=v.shape, init=v))


class Affine(_Neuron):
    """out = sat(relu?(rq(a + bias, m, s)))."""

    def __init__(self, bias, m, s, relu, t_start):
        n = len(bias)
        super().__init__(n, n, t_start, bias=bias, m=m, s=s, relu=int(relu))


class ComplexRecurrence(_Neuron):
    """Diagonal complex recurrence x = sat(((lam * x) >> 15) + rq(a_B + cb, m, s)); passes h through."""

    def __init__(self, n_modes, d_model, lam_re, lam_im, cb_re, cb_im, m, s, t_start):
        n = 2 * n_modes + d_model
        super().__init__(n, n, t_start, lam_re=lam_re, lam_im=lam_im, cb_re=cb_re, cb_im=cb_im, m=m, s=s,
                         x_re=np.zeros(n_modes), x_im=np.zeros(n_modes))


class Combine(_Neuron):
    """y = sat(rq(a_C + by, mC, sC) + rq(a_D, mD, sD)); passes h through."""

    def __init__(self, d_model, by, mc, sc, md, sd, t_start):
        super().__init__(3 * d_model, 2 * d_model, t_start, by=by, mc=mc, sc=sc, md=md, sd=sd)


class GluResidual(_Neuron):
    """h + (v * sigmoid_lut(g)) >> 15, with v, g requantized from their accumulators (gating by products)."""

    def __init__(self, d_model, b1, m1, s1, b2, m2, s2, lut, frac_bits, t_start):
        super().__init__(3 * d_model, d_model, t_start, b1=b1, m1=m1, s1=s1, b2=b2, m2=m2, s2=s2, lut=lut,
                         frac_bits=frac_bits)


def _port_types(cls):
    cls.a_in = LavaPyType(PyInPort.VEC_DENSE, np.int32, precision=24)
    cls.s_out = LavaPyType(PyOutPort.VEC_DENSE, np.int32, precision=16)
    cls.t_start = LavaPyType(np.ndarray, np.int64)
    return cls


class _Base(PyLoihiProcessModel):
    def run_spk(self):
        a = self.a_in.recv().astype(np.int64)
        if self.time_step < int(self.t_start[0]):
            self.s_out.send(np.zeros(self.s_out.shape, np.int32))
            return
        self.s_out.send(self.step(a).astype(np.int32))


@implements(proc=Affine, protocol=LoihiProtocol)
@requires(CPU)
@tag("fixed_pt")
@_port_types
class PyAffineFixed(_Base):
    bias = LavaPyType(np.ndarray, np.int64)
    m = LavaPyType(np.ndarray, np.int64)
    s = LavaPyType(np.ndarray, np.int64)
    relu = LavaPyType(np.ndarray, np.int64)

    def step(self, a):
        v = rq(a + self.bias, self.m[0], self.s[0])
        return sat(np.maximum(v, 0) if self.relu[0] else v)


@implements(proc=ComplexRecurrence, protocol=LoihiProtocol)
@requires(CPU)
@tag("fixed_pt")
@_port_types
class PyComplexRecurrenceFixed(_Base):
    lam_re = LavaPyType(np.ndarray, np.int64)
    lam_im = LavaPyType(np.ndarray, np.int64)
    cb_re = LavaPyType(np.ndarray, np.int64)
    cb_im = LavaPyType(np.ndarray, np.int64)
    m = LavaPyType(np.ndarray, np.int64)
    s = LavaPyType(np.ndarray, np.int64)
    x_re = LavaPyType(np.ndarray, np.int64)
    x_im = LavaPyType(np.ndarray, np.int64)

    def step(self, a):
        n = self.lam_re.shape[0]
        bur = rq(a[:n] + self.cb_re, self.m[0], self.s[0])
        bui = rq(a[n : 2 * n] + self.cb_im, self.m[0], self.s[0])
        r = (self.lam_re * self.x_re - self.lam_im * self.x_im + (1 << 14)) >> 15
        i = (self.lam_re * self.x_im + self.lam_im * self.x_re + (1 << 14)) >> 15
        self.x_re = sat(r + bur)
        self.x_im = sat(i + bui)
        return np.concatenate([self.x_re, self.x_im, a[2 * n :] >> 1])


@implements(proc=Combine, protocol=LoihiProtocol)
@requires(CPU)
@tag("fixed_pt")
@_port_types
class PyCombineFixed(_Base):
    by = LavaPyType(np.ndarray, np.int64)
    mc = LavaPyType(np.ndarray, np.int64)
    sc = LavaPyType(np.ndarray, np.int64)
    md = LavaPyType(np.ndarray, np.int64)
    sd = LavaPyType(np.ndarray, np.int64)

    def step(self, a):
        d = self.by.shape[0]
        y = sat(rq(a[:d] + self.by, self.mc[0], self.sc[0]) + rq(a[d : 2 * d], self.md[0], self.sd[0]))
        return np.concatenate([y, a[2 * d :] >> 1])


@implements(proc=GluResidual, protocol=LoihiProtocol)
@requires(CPU)
@tag("fixed_pt")
@_port_types
class PyGluResidualFixed(_Base):
    b1 = LavaPyType(np.ndarray, np.int64)
    m1 = LavaPyType(np.ndarray, np.int64)
    s1 = LavaPyType(np.ndarray, np.int64)
    b2 = LavaPyType(np.ndarray, np.int64)
    m2 = LavaPyType(np.ndarray, np.int64)
    s2 = LavaPyType(np.ndarray, np.int64)
    lut = LavaPyType(np.ndarray, np.int64)
    frac_bits = LavaPyType(np.ndarray, np.int64)

    def step(self, a):
        d = self.b1.shape[0]
        v = rq(a[:d] + self.b1, self.m1[0], self.s1[0])
        g = rq(a[d : 2 * d] + self.b2, self.m2[0], self.s2[0])
        sg = sigmoid_lut(g, self.lut, int(self.frac_bits[0]))
        return sat((a[2 * d :] >> 1) + ((v * sg + (1 << 14)) >> 15))


# --- graph ------------------------------------------------------------------------------------------


def build_and_run(net: dict, u: np.ndarray) -> tuple[dict, dict]:
    from scipy.sparse import csr_matrix

    from lava.magma.core.run_conditions import RunSteps
    from lava.magma.core.run_configs import Loihi2SimCfg
    from lava.proc.io.sink import RingBuffer as Sink
    from lava.proc.io.source import RingBuffer as Source
    from lava.proc.sparse.process import Sparse

    t0 = time.perf_counter()
    T = u.shape[0]
    L, N, H = net["b_re"].shape
    depth = 3 * L + 2
    total = T + depth
    data = np.zeros((u.shape[1], total), np.int32)
    data[:, :T] = u.T
    source = Source(data=data)
    eye, zh, zhn = 2 * np.eye(H, dtype=np.int64), np.zeros((H, H), np.int64), np.zeros((2 * H, 2 * N), np.int64)
    recorded = []  # (name, block, process, depth)

    def connect(port, weights, proc):
        conn = Sparse(weights=csr_matrix(np.asarray(weights, np.int32)), num_message_bits=16, weight_exp=0,
                      num_weight_bits=8)
        port.connect(conn.s_in)
        conn.a_out.connect(proc.a_in)

    enc = Affine(net["enc_b"], net["enc_m"], net["enc_s"], True, t_start=2)
    connect(source.s_out, net["enc_w"], enc)
    recorded.append(("h_enc", None, enc, 1))
    prev = enc
    for l in range(L):
        d0 = 3 * l + 2
        rec = ComplexRecurrence(N, H, net["lam_re"][l], net["lam_im"][l], net["cb_re"][l], net["cb_im"][l],
                                net["b_m"][l], net["b_s"][l], t_start=d0 + 1)
        connect(prev.s_out, np.vstack([net["b_re"][l], net["b_im"][l], eye]), rec)
        comb = Combine(H, net["c_b"][l], net["c_m"][l], net["c_s"][l], net["d_m"][l], net["d_s"][l], t_start=d0 + 2)
        w_c = np.vstack([np.hstack([net["c_re"][l], net["c_im"][l], zh]),
                         np.hstack([zhn, np.vstack([np.diag(net["d_w"][l]), eye])])])
        connect(rec.s_out, w_c, comb)
        glu = GluResidual(H, net["b1"][l], net["m1"][l], net["s1"][l], net["b2"][l], net["m2"][l], net["s2"][l],
                          net["sig_lut"], net["gate_frac_bits"], t_start=d0 + 3)
        connect(comb.s_out, np.vstack([np.hstack([net["w1"][l], zh]), np.hstack([net["w2"][l], zh]),
                                       np.hstack([zh, eye])]), glu)
        recorded += [("x", l, rec, d0), ("y", l, comb, d0 + 1), ("h", l, glu, d0 + 2)]
        prev = glu
    dec = Affine(net["dec_b"], net["dec_m"], net["dec_s"], False, t_start=depth + 1)
    connect(prev.s_out, net["dec_w"], dec)
    recorded.append(("mask", None, dec, depth))
    sinks = []
    for name, l, proc, d in recorded:
        sink = Sink(shape=proc.s_out.shape, buffer=total)
        proc.s_out.connect(sink.a_in)
        sinks.append(sink)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        source.run(condition=RunSteps(num_steps=total), run_cfg=Loihi2SimCfg(select_tag="fixed_pt"))
        sim_s = time.perf_counter() - t1
        raw = [np.rint(s.data.get()).astype(np.int64) for s in sinks]
    finally:
        source.stop()
    out = {"x": np.zeros((L, T, 2 * N), np.int64), "y": np.zeros((L, T, H), np.int64),
           "h": np.zeros((L, T, H), np.int64)}
    for (name, l, _, d), trace in zip(recorded, raw):
        window = trace[:, d : d + T].T  # a process at depth d handles frame t at time step t + d + 1
        if name == "x":
            out["x"][l] = window[:, : 2 * N]
        elif l is None:
            out[name] = window
        else:
            out[name][l] = window[:, :H]
    stats = {"sim_wall_s": sim_s, "build_wall_s": build_s, "lava_steps": total, "frames": T,
             "steps_per_s": total / sim_s if sim_s > 0 else None, "pipeline_depth_steps": depth}
    return out, stats


def main(argv: list) -> int:
    if len(argv) != 3:
        print("usage: lava_lrnn_worker.py IN.npz OUT.npz", file=sys.stderr)
        return 2
    try:
        with np.load(argv[1], allow_pickle=False) as z:
            net = {k: z[k] for k in z.files}
        u = net.pop("inputs_int")
        out, stats = build_and_run(net, u)
        folder = os.path.dirname(os.path.abspath(argv[2]))
        fd, tmp = tempfile.mkstemp(prefix=".lava_lrnn.", suffix=".npz", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, stats_json=np.array(json.dumps(stats)), **out)
            os.replace(tmp, argv[2])
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception as e:  # reported to the parent process as the last stderr line
        import traceback

        traceback.print_exc()
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"lava lrnn worker failed: {type(e).__name__}: {msg[:400]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
