"""NIR graphs for the tests, written with the ``nir`` package (the snnTorch one comes from
``bench/studies/nir_roundtrip.train_snntorch_digits``)."""
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
