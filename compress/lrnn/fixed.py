"""w8a16 fixed-point conversion of the S5 denoiser, and quantization-aware fine-tuning.

Precision (as in the sparse-LRNN paper): the recurrence ``lambda_bar`` is 16-bit (Q1.15), every other
weight is 8-bit per-tensor symmetric, activations are 16-bit (saturating at +-32767), the sigmoid of
the GLU is a 9-knot table with linear interpolation. The pre-norm is folded into ``B`` and ``D``.
Weights are stored as Lava sees them: ``2 q`` (even integers in [-254, 254], exact in Lava's 8-bit
mixed-sign synapses).

Integer network, per 8 ms frame (``rq(a, m, s) = (a m + 2^(s-1)) >> s``, ``sat`` clips to 16 bits):

    enc   h   = sat(relu(rq(We u + be, me, se)))
    block bu  = rq([Br; Bi] h + cb, mB, sB)                                 (re, im; units S_x)
          x   = sat(((lam * x) >> 15) + bu)      complex product, rounded    (the recurrence)
          y   = sat(rq([Cr Ci] [xr; xi] + by, mC, sC) + rq(Dd h, mD, sD))
          v   = rq(W1 y + b1, m1, s1);  g = rq(W2 y + b2, m2, s2)            (g in units 2^-10)
          h   = sat(h + ((v * sigmoid_lut(g) + 2^14) >> 15))
    dec   m   = sat(rq(Wd h + bd, md, sd))                                   (mask, units S_m)

The scales (S_in, S_h shared by the residual stream, S_x and S_y per block, S_m) put the
calibration data's peak at 2^14 (one bit of headroom). ``runtimes/lrnn_ref.py`` (Numba) and
``runtimes/lava_lrnn_worker.py`` (Lava) compute exactly this.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from edgesmith.compress.base import Artifact, PassConfig, PassContext, PassReport, PassResult, register_pass
from edgesmith.common import EdgesmithError, atomic_path
from edgesmith.common.checks import is_int
from edgesmith.models.lrnn.s5 import SIG_KNOTS, S5Denoiser
from edgesmith.models.lrnn.train import TrainConfig, train

FORMAT_NAME = "edgesmith-lrnn-fixed"
SCHEMA_VERSION = 1
ACT_MAX = 2 ** 15 - 1
PEAK = 2.0 ** 14
GATE_FRAC_BITS = 10
LUT = np.rint(torch.sigmoid(SIG_KNOTS).double().numpy() * 32767).astype(np.int64)


def float_params(model: S5Denoiser) -> dict:
    """The deployed network's float parameters: discrete SSM, pre-norm folded into B, cb, D and bias."""
    model = model.eval()
    p = {"enc_w": model.enc.weight.detach().double().numpy(), "enc_b": model.enc.bias.detach().double().numpy(),
         "dec_w": model.dec.weight.detach().double().numpy(), "dec_b": model.dec.bias.detach().double().numpy(),
         "blocks": []}
    with torch.no_grad():
        for blk in model.blocks:
            bn = blk.norm
            a = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).double().numpy()
            c = (bn.bias.double() - bn.running_mean.double() * torch.from_numpy(a)).numpy()
            e = blk.ssm.effective(False)
            lam = e["lam_re"].double().numpy() + 1j * e["lam_im"].double().numpy()
            bbar = e["b_re"].double().numpy() + 1j * e["b_im"].double().numpy()
            d = e["d"].double().numpy()
            p["blocks"].append({
                "lam": lam, "b": bbar * a[None, :], "cb": bbar @ c,
                "c_re": 2 * e["c_re"].double().numpy(), "c_im": -2 * e["c_im"].double().numpy(),
                "d": d * a, "by": d * c, "fold_a": a, "shift_c": c,
                "w1": blk.w1.weight.double().numpy(), "b1": blk.w1.bias.double().numpy(),
                "w2": blk.w2.weight.double().numpy(), "b2": blk.w2.bias.double().numpy()})
    return p


def float_trace(p: dict, feat: np.ndarray) -> dict:
    """Run the folded float network frame by frame on (clips, T, 257); return the peaks of every activation."""
    feat = np.asarray(feat, np.float64)
    n, T, _ = feat.shape
    L = len(p["blocks"])
    peaks = {"in": np.abs(feat).max(), "h": 0.0, "x": np.zeros(L), "y": np.zeros(L), "m": 0.0}
    h_all = np.maximum(feat @ p["enc_w"].T + p["enc_b"], 0)  # (n, T, H)
    peaks["h"] = np.abs(h_all).max()
    for l, b in enumerate(p["blocks"]):
        bu = h_all @ b["b"].T + b["cb"]  # (n, T, N)
        x = np.zeros((n, bu.shape[2]), complex)
        xs = np.zeros_like(bu)
        for t in range(T):
            x = b["lam"] * x + bu[:, t]
            xs[:, t] = x
        peaks["x"][l] = max(np.abs(xs.real).max(), np.abs(xs.imag).max())
        y = xs.real @ b["c_re"].T + xs.imag @ b["c_im"].T + b["by"] + h_all * b["d"]
        peaks["y"][l] = np.abs(y).max()
        v = y @ b["w1"].T + b["b1"]
        g = y @ b["w2"].T + b["b2"]
        h_all = h_all + v / (1 + np.exp(-g))
        peaks["h"] = max(peaks["h"], np.abs(h_all).max())
    mask = h_all @ p["dec_w"].T + p["dec_b"]
    peaks["m"] = np.abs(mask).max()
    return {"peaks": peaks, "mask": mask}


def quant8(w: np.ndarray) -> tuple[np.ndarray, float]:
    """(2 q as int64, s): symmetric 8-bit, ``q = clip(round(w / s), +-127)``, ``s = max|w| / 127``."""
    peak = float(np.max(np.abs(w))) if w.size else 0.0
    s = peak / 127 if peak > 0 else 1.0
    return 2 * np.clip(np.rint(w / s), -127, 127).astype(np.int64), s


def requant(ratio: float) -> tuple[int, int]:
    """(m, s) with m / 2^s ~ ratio, m < 2^15, s >= 1: the integer rescaling of an accumulator."""
    if not ratio > 0:
        return 0, 1
    s = int(math.floor(math.log2((2 ** 15 - 1) / ratio)))
    s = min(max(s, 1), 60)
    m = int(round(ratio * 2 ** s))
    if m >= 2 ** 15:
        raise EdgesmithError(f"a requantization ratio of {ratio:.3g} needs a multiplier above 16 bits.",
                             "re-calibrate with more representative data (an activation scale collapsed).")
    return m, s


def convert(model: S5Denoiser, calibration: np.ndarray) -> dict:
    """The integer network (npz arrays, schema in this module's docstring) for ``model``."""
    p = float_params(model)
    pk = float_trace(p, calibration)["peaks"]
    S_in = pk["in"] / PEAK
    S_h = pk["h"] / PEAK
    S_m = pk["m"] / PEAK
    S_g = 2.0 ** -GATE_FRAC_BITS
    out: dict[str, np.ndarray] = {}
    we, swe = quant8(p["enc_w"])
    A = swe * S_in / 2  # accumulator unit of (2 q) . u: each stored weight is worth s / 2
    out.update(enc_w=we, enc_b=np.rint(p["enc_b"] / A).astype(np.int64))
    out["enc_m"], out["enc_s"] = map(np.int64, requant(A / S_h))
    keys = ["b_re", "b_im", "cb_re", "cb_im", "b_m", "b_s", "lam_re", "lam_im", "c_re", "c_im", "c_b", "c_m", "c_s",
            "d_w", "d_m", "d_s", "w1", "b1", "m1", "s1", "w2", "b2", "m2", "s2", "x_scale", "y_scale"]
    per = {k: [] for k in keys}
    for l, b in enumerate(p["blocks"]):
        S_x = pk["x"][l] / PEAK if pk["x"][l] > 0 else 1.0
        S_y = pk["y"][l] / PEAK if pk["y"][l] > 0 else 1.0
        peak_b = max(np.abs(b["b"].real).max(), np.abs(b["b"].imag).max())
        s_b = peak_b / 127 if peak_b > 0 else 1.0
        per["b_re"].append(2 * np.clip(np.rint(b["b"].real / s_b), -127, 127).astype(np.int64))
        per["b_im"].append(2 * np.clip(np.rint(b["b"].imag / s_b), -127, 127).astype(np.int64))
        A_b = s_b * S_h / 2
        # the norm's shift through the *quantized* B (as quantization-aware training computes it: rounding the
        # folded B_bar * a and dividing a back out), not through the float B: for channels with a small scale a
        # the two differ by far more than a rounding step
        a_safe = np.where(b["fold_a"] < 0, -1.0, 1.0) * np.maximum(np.abs(b["fold_a"]), 1e-6)
        cb = ((per["b_re"][-1] + 1j * per["b_im"][-1]) * (s_b / 2) / a_safe) @ b["shift_c"]
        per["cb_re"].append(np.rint(cb.real / A_b).astype(np.int64))
        per["cb_im"].append(np.rint(cb.imag / A_b).astype(np.int64))
        m, s = requant(A_b / S_x)
        per["b_m"].append(m), per["b_s"].append(s)
        per["lam_re"].append(np.clip(np.rint(b["lam"].real * 2 ** 15), -ACT_MAX, ACT_MAX).astype(np.int64))
        per["lam_im"].append(np.clip(np.rint(b["lam"].imag * 2 ** 15), -ACT_MAX, ACT_MAX).astype(np.int64))
        peak_c = max(np.abs(b["c_re"]).max(), np.abs(b["c_im"]).max())
        s_c = peak_c / 127 if peak_c > 0 else 1.0
        per["c_re"].append(2 * np.clip(np.rint(b["c_re"] / s_c), -127, 127).astype(np.int64))
        per["c_im"].append(2 * np.clip(np.rint(b["c_im"] / s_c), -127, 127).astype(np.int64))
        A_c = s_c * S_x / 2
        dq, s_d = quant8(b["d"])
        by = dq * (s_d / 2) / a_safe * b["shift_c"]  # likewise through the quantized D
        per["c_b"].append(np.rint(by / A_c).astype(np.int64))
        m, s = requant(A_c / S_y)
        per["c_m"].append(m), per["c_s"].append(s)
        per["d_w"].append(dq)
        m, s = requant(s_d * S_h / 2 / S_y)
        per["d_m"].append(m), per["d_s"].append(s)
        for w, bias, target, tag in ((b["w1"], b["b1"], S_h, "1"), (b["w2"], b["b2"], S_g, "2")):
            q, s_w = quant8(w)
            A_w = s_w * S_y / 2
            per[f"w{tag}"].append(q)
            per[f"b{tag}"].append(np.rint(bias / A_w).astype(np.int64))
            m, s = requant(A_w / target)
            per[f"m{tag}"].append(m), per[f"s{tag}"].append(s)
        per["x_scale"].append(S_x), per["y_scale"].append(S_y)
    out.update({k: np.array(v) for k, v in per.items()})
    wd, swd = quant8(p["dec_w"])
    A = swd * S_h / 2
    out.update(dec_w=wd, dec_b=np.rint(p["dec_b"] / A).astype(np.int64))
    out["dec_m"], out["dec_s"] = map(np.int64, requant(A / S_m))
    out.update(format=np.array(FORMAT_NAME), schema_version=np.array(SCHEMA_VERSION),
               n_layers=np.array(len(p["blocks"])), input_scale=np.array(S_in), h_scale=np.array(S_h),
               mask_scale=np.array(S_m), sig_lut=LUT.copy(), gate_frac_bits=np.array(GATE_FRAC_BITS))
    return out


def quantize_features(net: dict, feat: np.ndarray) -> np.ndarray:
    """Float features (..., 257) -> 16-bit integer inputs of the fixed-point network."""
    return np.clip(np.rint(np.asarray(feat, np.float64) / float(net["input_scale"])), -ACT_MAX, ACT_MAX).astype(np.int64)


def save_net(net: dict, path: Path, force: bool = True) -> Path:
    with atomic_path(path, force=force) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **net)
    return Path(path)


def load_net(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            net = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise EdgesmithError(f"{path} cannot be read as an LRNN fixed-point network ({e}).",
                             "re-run the fixed-point conversion.") from None
    if str(net.get("format")) != FORMAT_NAME:
        raise EdgesmithError(f"{path} is not an {FORMAT_NAME} file.", "re-run the fixed-point conversion.")
    return net


def weight_bytes(net: dict) -> int:
    """Bytes of stored weights: 1 per non-zero 8-bit weight, 2 per 16-bit eigenvalue part (sparse count)."""
    eight = ["enc_w", "b_re", "b_im", "c_re", "c_im", "d_w", "w1", "w2", "dec_w"]
    return int(sum(np.count_nonzero(net[k]) for k in eight) + 2 * (net["lam_re"].size + net["lam_im"].size))


def qat_finetune(model: S5Denoiser, train_split, cfg: TrainConfig, after_step=None, log=None) -> dict:
    """Quantization-aware fine-tuning: train with fake-quantized weights and the table sigmoid.

    Why not brevitas (the tensor models' QAT, ``compress/qat_brevitas.py``): the weights this network stores are
    not any layer's parameter. B_bar and D are quantized after the pre-norm's scale is folded into them, C with
    one scale shared by its real and imaginary halves, the complex diagonal recurrence is not a Linear or Conv,
    and the sigmoid is the integer network's lookup table. Brevitas's QuantLinear/QuantConv quantize a layer's
    own weight with per-tensor or per-channel scales; expressing the folded, shared scales would take custom
    quant injectors around hand-written ops, i.e. this fake quantization again (``models/lrnn/s5.py``,
    ``effective``), with the bit-exactness to the fixed-point and Lava networks to re-prove."""
    model.quant = True
    try:
        return train(model, train_split, cfg, after_step=after_step, log=log)
    finally:
        model.quant = False


# --- the pass ------------------------------------------------------------------------------------------




@dataclass
class ExportLrnnFixedConfig(PassConfig):
    """torch S5 denoiser -> w8a16 fixed-point network file (``model.lrnn.npz``) for lrnn-ref and lava-lrnn.

    ``n_calibration`` clips of the context's calibration features set the activation scales.
    """

    kind: ClassVar[str] = "export-lrnn-fixed"
    contract_fixture: ClassVar[str] = "s5-torch"
    input_format: ClassVar[str] = "torch"
    output_format: ClassVar[str] = "lava"

    n_calibration: int = 32

    def validate(self) -> None:
        if not is_int(self.n_calibration, 1):
            self._fail("n_calibration", f"is {self.n_calibration!r}", "use a positive number of calibration clips.")


@register_pass(ExportLrnnFixedConfig)
def _export_lrnn_fixed(artifact: Artifact, config: ExportLrnnFixedConfig, ctx: PassContext) -> PassResult:
    if not isinstance(artifact.module, S5Denoiser):
        raise EdgesmithError(f"export-lrnn-fixed takes the S5 denoiser, not {type(artifact.module).__name__}.",
                             "use it on the lrnn-denoiser model; export other models with export-netx.")
    calib = ctx.calibration_checked("calibration features (clips, frames, 257)")
    if calib.ndim != 3:
        raise EdgesmithError(f"calibration features have shape {calib.shape}, not (clips, frames, 257).",
                             "pass feature clips from the lrnn-denoiser producer.")
    net = convert(artifact.module, calib[: config.n_calibration])
    path = save_net(net, ctx.workdir / "model.lrnn.npz")
    new = Artifact("lava", path=path, meta={**artifact.meta, "precision": "fixed", "network": FORMAT_NAME,
                                            "input_shape": list(calib.shape[1:])})
    report = PassReport(config.to_dict(), "torch", "lava", artifact.size_bytes(), new.size_bytes(),
                        bits_per_weight=8.0, notes=["recurrence 16-bit (Q1.15), other weights 8-bit, "
                                                    "activations 16-bit; pre-norm folded into B and D"],
                        extra={"weight_bytes": weight_bytes(net), "input_scale": float(net["input_scale"]),
                               "mask_scale": float(net["mask_scale"])})
    return PassResult(new, report)
