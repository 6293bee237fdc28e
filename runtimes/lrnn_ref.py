"""Bit-exact fixed-point reference of the deployed S5 denoiser (Numba), and its activity counts.

It computes, frame by frame, the integer network defined in ``compress/lrnn/fixed.py``; the Lava
graph of ``runtimes/lava_lrnn_worker.py`` computes the same integers (its outputs are this module's
delayed by the pipeline depth), so tests compare the two with a maximum difference of 0. All
arithmetic is int64 with explicit saturation to 16 bits; ``run`` also flags int32 accumulator
overflow (which Lava's Sparse would wrap).

Activity counts per run (the Loihi 2 cost model's input), with the Lava graph's connections:
``synops``: for every Sparse connection, each non-zero input message times the non-zero synapses of
its column (identity pass-through synapses included); ``neuron_updates``: every neuron of every
process each frame; ``messages``: non-zero outputs of the source and every process.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from edgesmith.compress.base import Artifact
from edgesmith.runtimes.base import Runtime, register_runtime
ACT_MAX = 2 ** 15 - 1
INT32_MAX = 2 ** 31 - 1


@njit(cache=True)
def _rq(a, m, s):
    return (a * m + (np.int64(1) << (s - 1))) >> s


@njit(cache=True)
def _sat(v):
    if v > ACT_MAX:
        return ACT_MAX
    if v < -ACT_MAX:
        return -ACT_MAX
    return v


@njit(cache=True)
def _sigmoid_lut(g, lut, frac_bits):
    span = np.int64(8) << frac_bits
    seg = np.int64(2) << frac_bits
    gc = min(max(g, -span), span - 1) + span
    shift = frac_bits + 1
    i = gc >> shift
    f = gc & (seg - 1)
    return lut[i] + (((lut[i + 1] - lut[i]) * f + (seg >> 1)) >> shift)


@njit(cache=True)
def _matvec(w, x, out):
    peak = 0
    for r in range(w.shape[0]):
        acc = np.int64(0)
        for c in range(w.shape[1]):
            if x[c] != 0 and w[r, c] != 0:
                acc += w[r, c] * x[c]
        out[r] = acc
        if abs(acc) > peak:
            peak = abs(acc)
    return peak


@njit(cache=True)
def _run(u, enc_w, enc_b, enc_m, enc_s, b_re, b_im, cb_re, cb_im, b_m, b_s, lam_re, lam_im,
         c_re, c_im, c_b, c_m, c_s, d_w, d_m, d_s, w1, b1, m1, s1, w2, b2, m2, s2,
         dec_w, dec_b, dec_m, dec_s, lut, frac_bits):
    T = u.shape[0]
    L, N, H = b_re.shape
    F = dec_w.shape[0]
    mask = np.zeros((T, F), np.int64)
    h_enc = np.zeros((T, H), np.int64)
    xs = np.zeros((L, T, 2 * N), np.int64)
    ys = np.zeros((L, T, H), np.int64)
    hs = np.zeros((L, T, H), np.int64)
    xr = np.zeros((L, N), np.int64)
    xi = np.zeros((L, N), np.int64)
    acc_h = np.zeros(H, np.int64)
    acc_n = np.zeros(N, np.int64)
    acc_n2 = np.zeros(N, np.int64)
    acc_c = np.zeros(H, np.int64)
    acc_c2 = np.zeros(H, np.int64)
    acc_f = np.zeros(F, np.int64)
    h = np.zeros(H, np.int64)
    y = np.zeros(H, np.int64)
    peak = 0
    for t in range(T):
        peak = max(peak, _matvec(enc_w, u[t], acc_h))
        for j in range(H):
            h[j] = _sat(max(_rq(acc_h[j] + enc_b[j], enc_m, enc_s), 0))
            h_enc[t, j] = h[j]
        for l in range(L):
            peak = max(peak, _matvec(b_re[l], h, acc_n))
            peak = max(peak, _matvec(b_im[l], h, acc_n2))
            for k in range(N):
                bur = _rq(acc_n[k] + cb_re[l, k], b_m[l], b_s[l])
                bui = _rq(acc_n2[k] + cb_im[l, k], b_m[l], b_s[l])
                r = (lam_re[l, k] * xr[l, k] - lam_im[l, k] * xi[l, k] + (1 << 14)) >> 15
                i = (lam_re[l, k] * xi[l, k] + lam_im[l, k] * xr[l, k] + (1 << 14)) >> 15
                xr[l, k] = _sat(r + bur)
                xi[l, k] = _sat(i + bui)
                xs[l, t, k] = xr[l, k]
                xs[l, t, N + k] = xi[l, k]
            peak = max(peak, _matvec(c_re[l], xr[l], acc_c))
            peak = max(peak, _matvec(c_im[l], xi[l], acc_c2))
            for j in range(H):
                yc = _rq(acc_c[j] + acc_c2[j] + c_b[l, j], c_m[l], c_s[l])
                yd = _rq(d_w[l, j] * h[j], d_m[l], d_s[l])
                y[j] = _sat(yc + yd)
                ys[l, t, j] = y[j]
            peak = max(peak, _matvec(w1[l], y, acc_c))
            peak = max(peak, _matvec(w2[l], y, acc_c2))
            for j in range(H):
                v = _rq(acc_c[j] + b1[l, j], m1[l], s1[l])
                g = _rq(acc_c2[j] + b2[l, j], m2[l], s2[l])
                sg = _sigmoid_lut(g, lut, frac_bits)
                h[j] = _sat(h[j] + ((v * sg + (1 << 14)) >> 15))
                hs[l, t, j] = h[j]
        peak = max(peak, _matvec(dec_w, h, acc_f))
        for f in range(F):
            mask[t, f] = _sat(_rq(acc_f[f] + dec_b[f], dec_m, dec_s))
    return mask, h_enc, xs, ys, hs, peak


ARG_ORDER = ("enc_w", "enc_b", "enc_m", "enc_s", "b_re", "b_im", "cb_re", "cb_im", "b_m", "b_s", "lam_re", "lam_im",
             "c_re", "c_im", "c_b", "c_m", "c_s", "d_w", "d_m", "d_s", "w1", "b1", "m1", "s1", "w2", "b2", "m2", "s2",
             "dec_w", "dec_b", "dec_m", "dec_s", "sig_lut", "gate_frac_bits")


def run(net: dict, u: np.ndarray) -> dict:
    """Integer inputs (T, 257) of one clip -> {"mask" (T, 257) int64, traces, "stats"}."""
    args = [np.ascontiguousarray(np.asarray(net[k], np.int64)) if np.ndim(net[k]) else np.int64(net[k])
            for k in ARG_ORDER]
    mask, h_enc, xs, ys, hs, peak = _run(np.ascontiguousarray(u, dtype=np.int64), *args)
    res = {"mask": mask, "h_enc": h_enc, "x": xs, "y": ys, "h": hs}
    res["stats"] = activity_counts(net, np.asarray(u), res)
    res["stats"]["overflow_int32_accumulator"] = bool(peak > INT32_MAX)
    return res


def _synops(w: np.ndarray, inputs: np.ndarray) -> int:
    """sum over frames of the non-zero synapses driven by each non-zero input (inputs (T, n_in))."""
    fan_out = np.count_nonzero(w, axis=0)
    return int(fan_out @ np.count_nonzero(inputs, axis=0))


def _layer(name: str, w: np.ndarray, inputs: np.ndarray, outputs: np.ndarray, relayed: int = 0) -> dict:
    """One Lava process's counts: ``w`` (neurons, fan-in) driven by ``inputs`` (T, fan-in), sending
    ``outputs`` (T, n) plus ``relayed`` messages it passes on unchanged (the residual stream)."""
    T = inputs.shape[0]
    return {"name": name, "neurons": int(w.shape[0]), "synapses": int(np.count_nonzero(w)),
            "dense_synapses": int(w.size), "synops": _synops(w, inputs), "neuron_updates": int(w.shape[0] * T),
            "messages": int(np.count_nonzero(outputs)) + int(relayed)}


def activity_counts(net: dict, u: np.ndarray, res: dict) -> dict:
    """Synops, neuron updates and messages of the Lava graph for one run (see the module docstring),
    in total and per process (encoder, per block x / y / h, decoder) for a core-mapping cost model."""
    T = u.shape[0]
    L, N, H = net["b_re"].shape
    eye = np.eye(H, dtype=np.int64)
    zeros = np.zeros
    per_layer = [_layer("encoder", net["enc_w"], u, res["h_enc"])]
    h_in = res["h_enc"]
    for l in range(L):
        xr, xi = res["x"][l][:, :N], res["x"][l][:, N:]
        y = res["y"][l]
        relay = int(np.count_nonzero(h_in))
        # x: the complex state (2N) plus H identity neurons that carry the block's input on
        per_layer.append(_layer(f"block{l}.x", np.vstack([net["b_re"][l], net["b_im"][l], eye]), h_in,
                                res["x"][l], relay))
        w_y = np.vstack([np.hstack([net["c_re"][l], net["c_im"][l], zeros((H, H), np.int64)]),
                         np.hstack([zeros((2 * H, 2 * N), np.int64), np.vstack([np.diag(net["d_w"][l]), eye])])])
        per_layer.append(_layer(f"block{l}.y", w_y, np.hstack([xr, xi, h_in]), y, relay))
        w_h = np.vstack([np.hstack([net["w1"][l], zeros((H, H), np.int64)]),
                         np.hstack([net["w2"][l], zeros((H, H), np.int64)]),
                         np.hstack([zeros((H, H), np.int64), eye])])
        per_layer.append(_layer(f"block{l}.h", w_h, np.hstack([y, h_in]), res["h"][l]))
        h_in = res["h"][l]
    per_layer.append(_layer("decoder", net["dec_w"], h_in, res["mask"]))
    input_messages = int(np.count_nonzero(u))
    return {"synops": sum(p["synops"] for p in per_layer),
            "neuron_updates": sum(p["neuron_updates"] for p in per_layer),
            "messages": input_messages + sum(p["messages"] for p in per_layer),
            "input_messages": input_messages, "timesteps": int(T), "per_layer": per_layer}


def run_clips(net: dict, u: np.ndarray) -> tuple[np.ndarray, dict]:
    """Integer inputs (clips, T, 257) -> (masks (clips, T, 257) int64, summed activity counts)."""
    masks, total = [], {"synops": 0, "neuron_updates": 0, "messages": 0, "timesteps": 0,
                        "overflow_int32_accumulator": False}
    for clip in u:
        r = run(net, clip)
        masks.append(r["mask"])
        for k in ("synops", "neuron_updates", "messages", "timesteps"):
            total[k] += r["stats"][k]
        total["per_layer"] = [{**p, **{k: p[k] + q[k] for k in ("synops", "neuron_updates", "messages")}}
                              for p, q in zip(total["per_layer"], r["stats"]["per_layer"])] \
            if "per_layer" in total else r["stats"]["per_layer"]
        total["overflow_int32_accumulator"] |= r["stats"]["overflow_int32_accumulator"]
    return np.stack(masks), total


# --- as a runtime -------------------------------------------------------------------------------------



@register_runtime
class LrnnReference(Runtime):
    """Feature clips (clips, frames, 257) float -> masks (clips, frames, 257), through the integer network."""

    name = "lrnn-ref"
    contract_fixture = "lrnn-fixed"
    formats = ("lava",)
    description = "bit-exact Numba model of the fixed-point S5 denoiser (the lava-lrnn reference)"

    def _load(self, artifact: Artifact) -> None:
        from edgesmith.compress.lrnn.fixed import load_net

        self.net_ = load_net(artifact.path)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        from edgesmith.compress.lrnn.fixed import quantize_features

        masks, stats = run_clips(self.net_, quantize_features(self.net_, x))
        return (masks * float(self.net_["mask_scale"])).astype(np.float32), {**stats, "threads": 1}
