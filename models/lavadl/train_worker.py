"""Train a Sigma-Delta (SDNN) classifier with lava-dl's SLAYER and export it with lava-dl's ``export_hdf5``.

    .venv-lava/bin/python models/lavadl/train_worker.py IN.npz OUT_DIR

A standalone script for the Python 3.10 Lava env (lava-dl 0.6, torch 2.3): it imports only numpy,
torch, h5py and lava-dl, never edgesmith. IN.npz holds ``x_train`` (N, F) float32, ``y_train`` (N,)
int64, ``x_test``, ``config_json`` ({"hidden": [...], "threshold", "epochs", "lr", "batch", "steps",
"seed"}). OUT_DIR receives ``network.net`` (lava-dl's netx HDF5) and ``train.npz`` (``test_logits``:
SLAYER's own quantization-aware float outputs on ``x_test`` at the last time step; ``info_json``:
per-epoch loss, train accuracy, seconds, versions). Both are written to temporary names and renamed.
On failure the error is the last stderr line and the exit code is 1.

The network is lava-dl's SDNN recipe: ``slayer.block.sigma_delta.Input`` (a Delta encoder), one
``Dense`` block per hidden width (Sigma-Delta ReLU neurons, 8-bit weights quantized in the forward
pass) and an ``Output`` block (a Sigma accumulator). Each sample is held for ``steps`` time steps;
the loss is cross-entropy on the output at the last step.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def build(n_in: int, n_out: int, hidden: list, threshold: float):
    import torch
    import torch.nn.functional as F
    from lava.lib.dl import slayer

    params = {"threshold": threshold, "tau_grad": 0.5, "scale_grad": 1.0, "requires_grad": True,
              "shared_param": True, "activation": F.relu}

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            blocks = [slayer.block.sigma_delta.Input(params)]
            width = n_in
            for h in hidden:
                blocks.append(slayer.block.sigma_delta.Dense(params, width, h, weight_scale=2))
                width = h
            blocks.append(slayer.block.sigma_delta.Output(params, width, n_out, weight_scale=2))
            self.blocks = torch.nn.ModuleList(blocks)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

        def export_hdf5(self, path: str) -> None:
            import h5py

            with h5py.File(path, "w") as h:
                layer = h.create_group("layer")
                for i, b in enumerate(self.blocks):
                    b.export_hdf5(layer.create_group(f"{i}"))

    return Net()


def main(argv: list) -> int:
    if len(argv) != 3:
        print("usage: train_worker.py IN.npz OUT_DIR", file=sys.stderr)
        return 2
    try:
        import torch

        with np.load(argv[1], allow_pickle=False) as z:
            x_tr, y_tr, x_te = z["x_train"], z["y_train"], z["x_test"]
            cfg = json.loads(str(z["config_json"]))
        out_dir = argv[2]
        torch.manual_seed(cfg["seed"])
        torch.set_num_threads(1)  # small batches; also makes the result independent of the core count
        steps = int(cfg["steps"])
        net = build(x_tr.shape[1], int(y_tr.max()) + 1, list(cfg["hidden"]), float(cfg["threshold"]))
        opt = torch.optim.Adam(net.parameters(), lr=float(cfg["lr"]))
        xt = torch.from_numpy(x_tr).float()
        yt = torch.from_numpy(y_tr).long()
        gen = torch.Generator().manual_seed(cfg["seed"])
        history = []
        t0 = time.perf_counter()
        for epoch in range(int(cfg["epochs"])):
            net.train()
            perm = torch.randperm(len(xt), generator=gen)
            total, correct, loss_sum = 0, 0, 0.0
            for i in range(0, len(xt), int(cfg["batch"])):
                idx = perm[i : i + int(cfg["batch"])]
                x = xt[idx].unsqueeze(-1).repeat(1, 1, steps)
                logits = net(x)[..., -1]
                loss = torch.nn.functional.cross_entropy(logits, yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss_sum += float(loss) * len(idx)
                correct += int((logits.argmax(1) == yt[idx]).sum())
                total += len(idx)
            history.append({"epoch": epoch + 1, "loss": loss_sum / total, "train_accuracy": correct / total})
            print(f"epoch {epoch + 1}: loss {loss_sum / total:.4f} train acc {correct / total:.4f}", file=sys.stderr)
        train_s = time.perf_counter() - t0
        net.eval()
        with torch.no_grad():
            test_logits = net(torch.from_numpy(x_te).float().unsqueeze(-1).repeat(1, 1, steps))[..., -1].numpy()
        import lava.lib.dl as dl  # noqa: F401  (version below)
        from importlib.metadata import version

        info = {"history": history, "train_seconds": train_s, "torch": torch.__version__,
                "lava_dl": version("lava-dl"), "lava_nc": version("lava-nc"), "config": cfg}
        net_tmp = os.path.join(out_dir, ".network.net.tmp")
        npz_tmp = os.path.join(out_dir, ".train.npz.tmp")
        net.export_hdf5(net_tmp)
        with open(npz_tmp, "wb") as f:
            np.savez(f, test_logits=test_logits.astype(np.float32), info_json=np.array(json.dumps(info)))
        os.replace(net_tmp, os.path.join(out_dir, "network.net"))
        os.replace(npz_tmp, os.path.join(out_dir, "train.npz"))
    except Exception as e:  # reported to the parent process as the last stderr line
        import traceback

        traceback.print_exc()
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"lava-dl training failed: {type(e).__name__}: {msg[:400]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
