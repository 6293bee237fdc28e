"""An S5-style denoiser: encoder, S5 blocks (pre-norm, complex diagonal SSM, GLU, residual), decoder.

S5 layer (Smith et al. 2023) as used by the sparse-LRNN paper: ``N`` complex modes kept once each
(conjugate symmetry: the real output is ``2 Re(C x)``), continuous eigenvalues
``lambda = -exp(log_neg_re) + i im`` (HiPPO-N-like init: real part -1/2, imaginary ``pi n``),
per-mode step ``dt``, zero-order hold: ``lambda_bar = exp(lambda dt)``,
``B_bar = (lambda_bar - 1) / lambda * B``. The recurrence ``x_t = lambda_bar x_{t-1} + B_bar u_t`` is
evaluated for training as an FFT convolution with the kernel ``lambda_bar ** t`` (same result as
the step-by-step loop, which ``step`` below gives for checking).

Block: ``u = norm(h)``; ``y = 2 Re(C x) + D u``; ``h + (W1 y + b1) * sigmoid(W2 y + b2)``.
The pre-norm is a per-channel affine normalization with running statistics (BatchNorm), because a
deployed fixed-point network folds it into ``B`` and ``D``; LayerNorm would need a per-step
division and square root the neuromorphic cores do not have.

``quant=True`` (quantization-aware training, w8a16): weights are fake-quantized to 8 bits per
tensor, ``lambda_bar`` to the 16-bit Q1.15 grid, and the sigmoid is the piecewise-linear table the
fixed-point network uses (``sigmoid_pwl``); rounding uses a straight-through gradient.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from edgesmith.models.lrnn.config import Config
from edgesmith.models.lrnn.data import N_BINS

# sigmoid table of the fixed-point GLU: knots at -8, -6, ..., 8 (9 values, 8 linear segments)
SIG_KNOTS = torch.arange(-8.0, 8.01, 2.0)
SIG_VALUES = torch.sigmoid(SIG_KNOTS)


@dataclass(frozen=True)
class S5Config(Config):
    """Width factor scales ``d_model`` and the number of complex modes together."""

    width: float = 1.0
    base_d_model: int = 64
    base_modes: int = 32
    n_layers: int = 3
    dt_min: float = 1e-3
    dt_max: float = 1e-1

    def validate(self) -> None:
        if not 0.05 <= self.width <= 8:
            self._fail("width", f"is {self.width}", "use a width factor from 0.05 to 8.")
        if self.n_layers < 1:
            self._fail("n_layers", f"is {self.n_layers}", "use at least one S5 layer.")
        if not 0 < self.dt_min < self.dt_max:
            self._fail("dt_min", f"is {self.dt_min} with dt_max {self.dt_max}", "use 0 < dt_min < dt_max.")

    @property
    def d_model(self) -> int:
        return max(4, int(round(self.base_d_model * self.width)))

    @property
    def modes(self) -> int:
        return max(2, int(round(self.base_modes * self.width)))


def ste_round(x: torch.Tensor) -> torch.Tensor:
    return x + (torch.round(x) - x).detach()


def fake_quant(w: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """Symmetric per-tensor fake quantization with a straight-through gradient."""
    qmax = 2 ** (bits - 1) - 1
    scale = w.detach().abs().max().clamp_min(1e-12) / qmax
    return torch.clamp(ste_round(w / scale), -qmax, qmax) * scale


def quant_q15(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(ste_round(x * 2 ** 15), -(2 ** 15 - 1), 2 ** 15 - 1) / 2 ** 15


def sigmoid_pwl(x: torch.Tensor) -> torch.Tensor:
    """The fixed-point network's sigmoid: linear interpolation between SIG_VALUES, flat outside +-8."""
    xc = torch.clamp(x, -8.0, 8.0 - 1e-6)
    pos = (xc + 8.0) / 2.0
    idx = torch.floor(pos).long().clamp(0, 7).detach()
    frac = pos - idx
    vals = SIG_VALUES.to(x.dtype)
    return vals[idx] + (vals[idx + 1] - vals[idx]) * frac


class S5SSM(nn.Module):
    def __init__(self, d_model: int, modes: int, cfg: S5Config, gen: torch.Generator):
        super().__init__()
        self.log_neg_re = nn.Parameter(torch.full((modes,), math.log(0.5)))
        self.im = nn.Parameter(math.pi * torch.arange(modes, dtype=torch.float32))
        u = torch.rand(modes, generator=gen)
        self.log_dt = nn.Parameter(math.log(cfg.dt_min) + u * (math.log(cfg.dt_max) - math.log(cfg.dt_min)))
        self.B_re = nn.Parameter(torch.randn(modes, d_model, generator=gen) / math.sqrt(2 * d_model))
        self.B_im = nn.Parameter(torch.randn(modes, d_model, generator=gen) / math.sqrt(2 * d_model))
        self.C_re = nn.Parameter(torch.randn(d_model, modes, generator=gen) / math.sqrt(2 * modes))
        self.C_im = nn.Parameter(torch.randn(d_model, modes, generator=gen) / math.sqrt(2 * modes))
        self.D = nn.Parameter(torch.randn(d_model, generator=gen) * 0.1)

    def discrete(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(lambda_bar (N,) complex, B_bar (N, H) complex) by zero-order hold."""
        lam = torch.complex(-torch.exp(self.log_neg_re), self.im)
        lam_bar = torch.exp(lam * torch.exp(self.log_dt))
        b = torch.complex(self.B_re, self.B_im)
        return lam_bar, ((lam_bar - 1) / lam)[:, None] * b

    def effective(self, quant: bool, fold: torch.Tensor | None = None) -> dict:
        """The discrete parameters the network computes with (fake-quantized when ``quant``).

        ``fold`` is the pre-norm's per-channel scale: the fixed-point network stores ``B_bar * fold`` and
        ``D * fold`` (the norm folded in) as 8-bit tensors, so quantization-aware training rounds those
        products and divides the scale back out, computing with exactly the weights that get deployed."""
        lam_bar, b_bar = self.discrete()
        p = {"lam_re": lam_bar.real, "lam_im": lam_bar.imag, "b_re": b_bar.real, "b_im": b_bar.imag,
             "c_re": self.C_re, "c_im": self.C_im, "d": self.D}
        if quant:
            a = torch.ones(self.D.shape[0]) if fold is None else fold.detach()
            a = torch.where(a < 0, -1.0, 1.0) * a.abs().clamp_min(1e-6)  # a zero scale would divide by zero
            p["lam_re"], p["lam_im"] = quant_q15(p["lam_re"]), quant_q15(p["lam_im"])
            b_re, b_im = p["b_re"] * a, p["b_im"] * a
            peak_b = torch.maximum(b_re.detach().abs().max(), b_im.detach().abs().max())
            p["b_re"], p["b_im"] = (torch.clamp(ste_round(b / peak_b * 127), -127, 127) * peak_b / 127 / a
                                    for b in (b_re, b_im))
            p["d"] = fake_quant(p["d"] * a) / a
            peak_c = torch.maximum(p["c_re"].detach().abs().max(), p["c_im"].detach().abs().max())
            for k in ("c_re", "c_im"):  # one scale for both, as the fixed-point network stores [C_re C_im]
                p[k] = torch.clamp(ste_round(p[k] / peak_c * 127), -127, 127) * peak_c / 127
        return p

    def forward(self, u: torch.Tensor, quant: bool = False, fold: torch.Tensor | None = None) -> torch.Tensor:
        """u (batch, T, H) -> y (batch, T, H), by FFT convolution with lambda_bar ** t."""
        p = self.effective(quant, fold)
        lam = torch.complex(p["lam_re"], p["lam_im"])
        bu = torch.complex(u @ p["b_re"].T, u @ p["b_im"].T)  # (b, T, N)
        T = u.shape[1]
        t = torch.arange(T, dtype=torch.float32)
        kernel = torch.exp(torch.log(lam)[:, None] * t[None, :])  # (N, T) lambda_bar ** t
        n = 2 * T
        x = torch.fft.ifft(torch.fft.fft(bu.transpose(1, 2), n=n) * torch.fft.fft(kernel, n=n), n=n)[..., :T]
        x = x.transpose(1, 2)  # (b, T, N)
        return 2 * (x.real @ p["c_re"].T - x.imag @ p["c_im"].T) + p["d"] * u

    def step(self, u: torch.Tensor) -> torch.Tensor:
        """The same map, evaluated as the explicit recurrence (for tests)."""
        p = self.effective(False)
        lam = torch.complex(p["lam_re"], p["lam_im"])
        x = torch.zeros(u.shape[0], lam.shape[0], dtype=torch.complex64)
        out = []
        for k in range(u.shape[1]):
            x = lam * x + torch.complex(u[:, k] @ p["b_re"].T, u[:, k] @ p["b_im"].T)
            out.append(2 * (x.real @ p["c_re"].T - x.imag @ p["c_im"].T) + p["d"] * u[:, k])
        return torch.stack(out, 1)


class S5Block(nn.Module):
    def __init__(self, d_model: int, modes: int, cfg: S5Config, gen: torch.Generator):
        super().__init__()
        self.norm = nn.BatchNorm1d(d_model)
        self.ssm = S5SSM(d_model, modes, cfg, gen)
        self.w1 = nn.Linear(d_model, d_model)
        self.w2 = nn.Linear(d_model, d_model)

    def forward(self, h: torch.Tensor, quant: bool = False) -> torch.Tensor:
        if quant:  # as deployed: the norm's running statistics, frozen, folded into B and D
            n = self.norm
            u = nn.functional.batch_norm(h.transpose(1, 2), n.running_mean, n.running_var, n.weight, n.bias, False,
                                         0.0, n.eps).transpose(1, 2)
            y = self.ssm(u, quant, fold=n.weight / torch.sqrt(n.running_var + n.eps))
        else:
            u = self.norm(h.transpose(1, 2)).transpose(1, 2)
            y = self.ssm(u, quant)
        w1, w2 = (fake_quant(self.w1.weight), fake_quant(self.w2.weight)) if quant else (self.w1.weight, self.w2.weight)
        gate = sigmoid_pwl if quant else torch.sigmoid
        return h + (y @ w1.T + self.w1.bias) * gate(y @ w2.T + self.w2.bias)


class S5State(NamedTuple):
    """The recurrence's state for ``S5Denoiser.step``: real and imaginary parts, (layers, batch, modes)."""

    x_re: torch.Tensor
    x_im: torch.Tensor


def _discrete_real(ssm: "S5SSM") -> tuple[torch.Tensor, ...]:
    """``S5SSM.discrete`` in real arithmetic (exportable): lambda_bar and B_bar as real and imaginary parts."""
    a, w, dt = -torch.exp(ssm.log_neg_re), ssm.im, torch.exp(ssm.log_dt)
    mag = torch.exp(a * dt)
    lr, li = mag * torch.cos(w * dt), mag * torch.sin(w * dt)
    den = a * a + w * w
    zr, zi = ((lr - 1) * a + li * w) / den, (li * a - (lr - 1) * w) / den  # (lambda_bar - 1) / lambda
    return lr, li, zr[:, None] * ssm.B_re - zi[:, None] * ssm.B_im, zr[:, None] * ssm.B_im + zi[:, None] * ssm.B_re


class S5Denoiser(nn.Module):
    """Magnitude features (batch, T, 257) -> mask (batch, T, 257); causal in T."""

    def __init__(self, cfg: S5Config = S5Config(), seed: int = 0):
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        d, m = cfg.d_model, cfg.modes
        self.enc = nn.Linear(N_BINS, d)
        self.blocks = nn.ModuleList([S5Block(d, m, cfg, gen) for _ in range(cfg.n_layers)])
        self.dec = nn.Linear(d, N_BINS)
        nn.init.zeros_(self.dec.bias)
        self.quant = False

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        q = self.quant
        w_e = fake_quant(self.enc.weight) if q else self.enc.weight
        h = torch.relu(feat @ w_e.T + self.enc.bias)
        for blk in self.blocks:
            h = blk(h, q)
        w_d = fake_quant(self.dec.weight) if q else self.dec.weight
        return h @ w_d.T + self.dec.bias

    # the streaming step (``export-step-onnx``): one feature frame and the recurrence's state in, the
    # frame's mask and the new state out; exactly ``forward`` evaluated frame by frame (float weights)
    step_input = ("frame", torch.float32, (N_BINS,))
    step_output = "mask"
    state_batch_dim = 1

    def zero_state(self, batch: int) -> S5State:
        shape = (self.cfg.n_layers, batch, self.cfg.modes)
        return S5State(torch.zeros(shape), torch.zeros(shape))

    def step(self, frame: torch.Tensor, state: S5State) -> tuple[torch.Tensor, S5State]:
        h = torch.relu(self.enc(frame))
        xs_re, xs_im = [], []
        for l, blk in enumerate(self.blocks):
            u = blk.norm(h)
            lr, li, br, bi = _discrete_real(blk.ssm)
            x_re = lr * state.x_re[l] - li * state.x_im[l] + u @ br.T
            x_im = lr * state.x_im[l] + li * state.x_re[l] + u @ bi.T
            y = 2 * (x_re @ blk.ssm.C_re.T - x_im @ blk.ssm.C_im.T) + blk.ssm.D * u
            h = h + blk.w1(y) * torch.sigmoid(blk.w2(y))
            xs_re.append(x_re), xs_im.append(x_im)
        return self.dec(h), S5State(torch.stack(xs_re), torch.stack(xs_im))

    def prunable(self) -> list[tuple[str, list[nn.Parameter]]]:
        """Weight groups iterative magnitude pruning acts on; one mask per group, from the group's magnitude.

        Complex matrices (B, C) are one group of (real, imag), so a pruned complex weight is zero in
        both parts (and ZOH's complex factor keeps B_bar zero there). D, eigenvalues, biases and
        norms are not pruned.
        """
        out = [("enc.weight", [self.enc.weight])]
        for i, b in enumerate(self.blocks):
            out += [(f"blocks.{i}.ssm.B", [b.ssm.B_re, b.ssm.B_im]), (f"blocks.{i}.ssm.C", [b.ssm.C_re, b.ssm.C_im])]
            out += [(f"blocks.{i}.w1.weight", [b.w1.weight]), (f"blocks.{i}.w2.weight", [b.w2.weight])]
        return out + [("dec.weight", [self.dec.weight])]

    def dense_macs_per_step(self) -> int:
        """Real multiply-accumulates of one 8 ms step of the dense float model (complex product = 4)."""
        d, n = self.cfg.d_model, self.cfg.modes
        per_block = 2 * n * d + 4 * n + 2 * n * d + d + 2 * d * d
        return 2 * N_BINS * d + self.cfg.n_layers * per_block

    def workload_counts(self, input_shape) -> dict:
        """MACs of one clip shaped ``input_shape`` (frames, 257) and the layers each frame runs (enc, per block
        B / recurrence / C / W1 / W2, dec): the forward calls its weights directly, so hooks cannot count them."""
        return {"macs": float(self.dense_macs_per_step() * int(input_shape[0])), "n_layers": 2 + 5 * self.cfg.n_layers}

    def effective_macs_per_step(self) -> int:
        """MACs left after pruning: non-zero weights plus the dense recurrence and D terms."""
        d, n = self.cfg.d_model, self.cfg.modes
        nnz = sum(int(torch.count_nonzero(p)) for _, group in self.prunable() for p in group)
        return nnz + self.cfg.n_layers * (4 * n + d)
