"""NIR graphs for the tests, written with the ``nir`` package (and one exported by snnTorch)."""
from __future__ import annotations

import numpy as np

DT = 1e-4


def lif_params(n: int, beta: float = 0.9, threshold: float = 1.0) -> dict:
    tau = DT / (1 - beta)
    return dict(tau=np.full(n, tau), r=np.full(n, tau / DT), v_leak=np.zeros(n), v_threshold=np.full(n, threshold),
                v_reset=np.zeros(n))


def chain_graph(readout: str = "LI", n_in: int = 8, hidden: int = 20, n_out: int = 4, seed: int = 0, extra=None,
                type_check: bool = True):
    """Input -> Affine -> LIF -> Linear -> readout (LI, CubaLIF, IF or I) -> Output; ``extra`` adds nodes/edges
    (``type_check=False`` for graphs whose added nodes nir's shape inference cannot follow)."""
    import nir

    rng = np.random.default_rng(seed)
    tau = DT / (1 - 0.9)
    last = {
        "LI": lambda: nir.LI(tau=np.full(n_out, tau), r=np.full(n_out, tau / DT), v_leak=np.zeros(n_out)),
        "CubaLIF": lambda: nir.CubaLIF(tau_syn=np.full(n_out, 2 * tau), tau_mem=np.full(n_out, tau),
                                       r=np.full(n_out, tau / DT), v_leak=np.zeros(n_out),
                                       v_threshold=np.full(n_out, 0.5), v_reset=np.zeros(n_out),
                                       w_in=np.full(n_out, 2 * tau / DT)),
        "IF": lambda: nir.IF(r=np.full(n_out, 1 / DT), v_threshold=np.full(n_out, 1.0), v_reset=np.zeros(n_out)),
        "I": lambda: nir.I(r=np.full(n_out, 1 / DT)),
    }[readout]()
    nodes = {"input": nir.Input(input_type={"input": np.array([n_in])}),
             "fc1": nir.Affine(weight=rng.normal(0, 0.3, (hidden, n_in)), bias=rng.normal(0, 0.05, hidden)),
             "lif1": nir.LIF(**lif_params(hidden)),
             "fc2": nir.Linear(weight=rng.normal(0, 0.3, (n_out, hidden))),
             "readout": last,
             "output": nir.Output(output_type={"output": np.array([n_out])})}
    edges = [("input", "fc1"), ("fc1", "lif1"), ("lif1", "fc2"), ("fc2", "readout"), ("readout", "output")]
    if extra:
        extra(nodes, edges)
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=type_check)


def train_snntorch_digits(x_tr, y_tr, steps: int = 16, epochs: int = 15, seed: int = 0):
    """A 64-64-10 snnTorch Leaky network (reset to zero) trained on spike counts, exported with export_to_nir.

    Per-neuron beta and threshold tensors: snnTorch 1.0 exports scalar ones with shape () that nir's type
    inference rejects."""
    import snntorch as snn
    import torch
    from snntorch import utils as snn_utils
    from snntorch.export_nir import export_to_nir

    torch.manual_seed(seed)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, 64)
            self.lif1 = snn.Leaky(beta=torch.full((64,), 0.9), threshold=torch.ones(64), init_hidden=True,
                                  reset_mechanism="zero")
            self.fc2 = torch.nn.Linear(64, 10)
            self.lif2 = snn.Leaky(beta=torch.full((10,), 0.9), threshold=torch.ones(10), init_hidden=True,
                                  reset_mechanism="zero", output=True)

        def forward(self, x):
            snn_utils.reset(self)
            count = 0
            for _ in range(steps):
                spk, _ = self.lif2(self.fc2(self.lif1(self.fc1(x))))
                count = count + spk
            return count

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    x, y = torch.tensor(x_tr, dtype=torch.float32), torch.tensor(y_tr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad(), loss.backward(), opt.step()
    return net, export_to_nir(net, torch.zeros(1, 64), ignore_dims=[0])
