"""Train the small reference RWKV models on stdlib text and write them in the official layout.

    python -m edgesmith.models.rwkv.train --version 6            # -> models/rwkv/weights/rwkv6-ref.pth (+ .json)
    python -m edgesmith.models.rwkv.train --version 7 --force    # replace the shipped weights
    python -m edgesmith.models.rwkv.train --version 7 --size large --steps 1200 --device cuda
                                                                 # -> <cache>/rwkv/rwkv7-ref-large.pth (+ .json)
    python -m edgesmith.models.rwkv.train --version 6 --size large --device cuda --minutes 5
                                                                 # as many steps as fit in 5 minutes there

Sizes (``SIZES``): "small" is the shipped 2 layers x 128 pair (minutes on a CPU); "large" is 6 layers x 512
with 64-wide heads, trained longer on bigger batches, for the quantization table where weight distributions
must be far from uniform. It is not shipped (about 40 MB in fp16): it lives in the cache, and training it
takes a GPU a few minutes or a 2-core CPU many hours.

The weights are saved in fp16 (official key names, loadable by ``load_rwkv``) beside a JSON file
with the settings, the data fingerprint, the training loss and the held-out perplexity. Training
is seeded; with the same torch build and thread count it reproduces the same weights. (The shipped
rwkv7-ref was trained when RWKV-7's sequence form still ran token by token; the chunked form rounds
differently, so a retrain now gives a different model of the same quality: perplexity 5.828 vs 5.706 at
seed 0, 5.683 and 5.513 at seeds 1 and 2.)
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass, asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from edgesmith.common import EdgesmithError, cache_dir, seed_everything, write_json
from edgesmith.models.rwkv.base import RWKVConfig
from edgesmith.models.rwkv.checkpoint import build_model, save_rwkv
from edgesmith.models.rwkv.data import load_splits, sequences

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


@dataclass
class TrainSettings:
    version: int = 7
    n_layer: int = 2
    n_embd: int = 128
    head_size: int = 32
    seq_len: int = 64
    batch: int = 32
    steps: int = 300
    lr: float = 3e-3
    weight_decay: float = 0.01
    seed: int = 0
    eval_seq_len: int = 256
    eval_sequences: int = 64
    device: str = "cpu"

    def model_config(self) -> RWKVConfig:
        return RWKVConfig(version=self.version, n_layer=self.n_layer, n_embd=self.n_embd, head_size=self.head_size)


SIZES = {  # the settings each size changes from TrainSettings' defaults
    "small": {},
    "large": {"n_layer": 6, "n_embd": 512, "head_size": 64, "seq_len": 128, "batch": 128, "steps": 1200, "lr": 1e-3,
              "weight_decay": 0.1},
}


def reference_paths(version: int, weights_dir: Path | None = None, size: str = "small") -> tuple[Path, Path]:
    """The weights and facts files of a reference model: the shipped folder for "small", the cache for "large"."""
    if size not in SIZES:
        raise EdgesmithError(f"unknown reference size {size!r}.", f"use one of {', '.join(SIZES)}.")
    if weights_dir is None:
        weights_dir = WEIGHTS_DIR if size == "small" else cache_dir() / "rwkv"
    stem = f"rwkv{version}-ref" + ("" if size == "small" else f"-{size}")
    return weights_dir / f"{stem}.pth", weights_dir / f"{stem}.json"


@torch.no_grad()
def window_nll(forward, windows: np.ndarray, batch: int = 16) -> np.ndarray:
    """Mean next-byte cross-entropy (nats) of each window under ``forward`` (tokens (B, T) -> logits
    (B, T, V)): paired per-window differences give a standard error when two models are compared."""
    from edgesmith.models.metrics import token_nll

    out = []
    for i in range(0, len(windows), batch):
        x = np.ascontiguousarray(windows[i:i + batch])
        logits = forward(torch.from_numpy(x[:, :-1]))
        if isinstance(logits, torch.Tensor):  # half precisions widened for numpy; float64 kept as it is
            logits = (logits if logits.dtype == torch.float64 else logits.float()).detach().cpu().numpy()
        else:
            logits = np.asarray(logits)
        out.append(token_nll(logits, x[:, 1:].astype(np.int64)).mean(1))
    return np.concatenate(out)


def perplexity(forward, windows: np.ndarray, batch: int = 16) -> float:
    """exp(mean next-byte cross-entropy) of ``forward`` over equal-length windows."""
    return math.exp(float(window_nll(forward, windows, batch).mean()))


def make_optimizer(model, settings: TrainSettings) -> torch.optim.AdamW:
    """AdamW with weight decay on the 2-D weight matrices only (not on norms, mixes, decays or LoRA biases)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim == 2 and ("weight" in name) and "ln" not in name else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=settings.lr, betas=(0.9, 0.99))


def train_step(model, opt, x: torch.Tensor, recurrent: bool = False) -> torch.Tensor:
    """One optimizer step of next-token prediction on windows ``x`` (B, T+1); returns the loss (not synced).
    ``recurrent=True`` runs the sequence through the token-by-token WKV in place of the chunked one (the same
    function, for timing the two)."""
    logits, _ = model(x[:, :-1], recurrent=recurrent)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach()


def timed_train_step(model, opt, x: torch.Tensor, recurrent: bool = False) -> tuple[float, float]:
    """``train_step`` timed on the wall clock, the device synchronized around it: (loss, seconds)."""
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)
    t0 = time.perf_counter()
    loss = float(train_step(model, opt, x, recurrent))  # float() waits for the device
    return loss, time.perf_counter() - t0


def random_windows(text: np.ndarray, rng: np.random.Generator, settings: TrainSettings, device) -> torch.Tensor:
    """``settings.batch`` random windows of ``seq_len + 1`` tokens from ``text``, on ``device``."""
    starts = rng.integers(0, len(text) - settings.seq_len - 1, size=settings.batch)
    return torch.from_numpy(np.stack([text[s:s + settings.seq_len + 1] for s in starts])).to(device)


def steps_for_budget(settings: TrainSettings, minutes: float, probe_steps: int = 10,
                     text_root: str | Path | None = None) -> tuple[int, float]:
    """How many steps of ``settings`` fit in ``minutes``: ``probe_steps`` timed training steps (after one
    warm-up) of a throwaway model on this device; returns (steps, median seconds per step). The final
    evaluation is not counted (seconds). The training run itself is then an ordinary ``--steps N`` run."""
    device = torch.device(settings.device)
    text = load_splits(root=text_root).train
    model = build_model(settings.model_config()).to(device).train()
    opt, rng = make_optimizer(model, settings), np.random.default_rng(settings.seed + 1)
    times = [timed_train_step(model, opt, random_windows(text, rng, settings, device))[1]
             for _ in range(probe_steps + 1)]
    per_step = statistics.median(times[1:])  # the first step warms up
    steps = int(minutes * 60 / per_step)
    if steps < 1:
        raise EdgesmithError(f"{minutes} min fits no training step here ({per_step:.2f} s per step).",
                             "give more minutes, or a smaller --batch.")
    return steps, per_step


def train(settings: TrainSettings, log=print, text_root: str | Path | None = None):
    """Train one reference model; returns (model on the CPU, facts dict). ``text_root``: the standard library
    folder to read (default: this interpreter's); the facts' data fingerprint says which text it was."""
    seed_everything(settings.seed)
    splits = load_splits(root=text_root)
    cfg = settings.model_config()
    device = torch.device(settings.device)
    model = build_model(cfg).to(device)
    opt = make_optimizer(model, settings)
    rng = np.random.default_rng(settings.seed)
    t0, losses = time.perf_counter(), []
    model.train()
    for step in range(settings.steps):
        lr = settings.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / settings.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        losses.append(train_step(model, opt, random_windows(splits.train, rng, settings, device)))
        if step % 50 == 0 or step == settings.steps - 1:
            losses = [float(v) for v in losses]  # one device sync per 50 steps, not per step
            el = time.perf_counter() - t0
            log(f"step {step:4d}/{settings.steps}  loss {np.mean(losses[-50:]):.3f}  lr {lr:.2e}  {el:.0f}s  "
                f"{(step + 1) / el:.2f} step/s  ETA {el / (step + 1) * (settings.steps - step - 1):.0f}s")
    losses = [float(v) for v in losses]
    model.eval()
    windows = sequences(splits.eval, settings.eval_seq_len + 1, settings.eval_sequences)
    ppl = perplexity(lambda x: model(x.to(device))[0], windows)
    facts = {"settings": asdict(settings), "config": cfg.to_dict(), "train_seconds": time.perf_counter() - t0,
             "final_train_loss": float(np.mean(losses[-50:])), "eval_perplexity": ppl,
             "eval_tokens": int(windows[:, 1:].size), "data_fingerprint": splits.fingerprint(),
             "torch": torch.__version__, "threads": torch.get_num_threads(),
             "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    log(f"held-out perplexity {ppl:.3f} over {facts['eval_tokens']} bytes")
    return model.cpu(), facts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, choices=(6, 7), required=True)
    ap.add_argument("--size", choices=sorted(SIZES), default="small", help="the preset (see SIZES)")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the size's)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="train as many steps as fit in this many minutes here (timed on 10 probe steps first; "
                         "the facts record the step count, which --steps reproduces)")
    ap.add_argument("--n-layer", type=int, default=None)
    ap.add_argument("--n-embd", type=int, default=None)
    ap.add_argument("--head-size", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps runs reproducible and polite)")
    ap.add_argument("--text-root", type=Path, default=None,
                    help="a Python standard library folder to train on (default: this interpreter's)")
    ap.add_argument("--out-dir", type=Path, default=None, help="default: the shipped folder (small) or the cache")
    ap.add_argument("--force", action="store_true", help="replace existing weights")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    given = {k: getattr(a, k) for k in ("steps", "n_layer", "n_embd", "head_size", "batch", "lr")
             if getattr(a, k) is not None}
    s = TrainSettings(**{**SIZES[a.size], **given, "version": a.version, "seed": a.seed, "device": a.device})
    if a.minutes is not None and (a.steps is not None or a.minutes <= 0):
        raise SystemExit("--minutes must be positive and cannot be combined with --steps.")
    pth, js = reference_paths(a.version, a.out_dir, a.size)
    if pth.exists() and not a.force:
        raise SystemExit(f"{pth} exists; pass --force to replace it.")
    try:
        budget = None
        if a.minutes is not None:
            s.steps, per_step = steps_for_budget(s, a.minutes, text_root=a.text_root)
            budget = {"minutes": a.minutes, "probe_seconds_per_step": per_step, "probe_steps": 10}
            print(f"probe: {per_step:.3f} s per step -> {s.steps} steps fit in {a.minutes:g} min "
                  f"(the same run: --steps {s.steps})")
        model, facts = train(s, text_root=a.text_root)
        if budget:
            facts["budget"] = budget
        save_rwkv(model, pth, dtype=torch.float16, force=a.force)
    except EdgesmithError as e:
        raise SystemExit(str(e)) from None
    write_json(js, facts)
    print(f"wrote {pth} ({pth.stat().st_size / 1e6:.2f} MB) and {js}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
