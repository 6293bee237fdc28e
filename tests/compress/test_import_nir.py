"""NIR graphs in: reading a chain, its float semantics, the fixed-point Lava LIF network, refusals by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.common import EdgesmithError
from edgesmith.compress import Artifact, PassContext, netx_format, run_passes
from edgesmith.compress.import_nir import ImportNirConfig, compare, quantize
from edgesmith.compress.nir_graph import load_chain, simulate_float, to_chain
from nir_graphs import DT, chain_graph, lif_params


def _write(graph, path):
    import nir

    nir.write(str(path), graph)
    return path


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(1).uniform(0, 2, (40, 8))


def test_a_chain_is_read_with_transforms_composed_and_flatten_folded(tmp_path):
    import nir

    def extra(nodes, edges):  # Input -> Flatten -> fc0 (Linear) -> fc1: two transforms compose into one
        nodes["flat"] = nir.Flatten(input_type={"input": np.array([8])}, start_dim=0)
        nodes["fc0"] = nir.Linear(weight=np.eye(8) * 2.0)
        edges.remove(("input", "fc1"))
        edges += [("input", "flat"), ("flat", "fc0"), ("fc0", "fc1")]

    g = chain_graph("LI", extra=extra)
    chain = load_chain(_write(g, tmp_path / "g.nir"))
    assert [lyr.neuron for lyr in chain.layers] == ["LIF", "LI"] and chain.readout == "voltage"
    np.testing.assert_allclose(chain.layers[0].weight, g.nodes["fc1"].weight * 2.0)


def test_float_semantics_are_forward_euler_with_reset_to_zero():
    # one LIF neuron, beta 0.9, constant input current 0.3 per step: v = 0.9 v + 0.3, spike when v > 1
    import nir

    g = nir.NIRGraph(nodes={"input": nir.Input(input_type={"input": np.array([1])}),
                            "fc": nir.Linear(weight=np.array([[1.0]])), "lif": nir.LIF(**lif_params(1)),
                            "output": nir.Output(output_type={"output": np.array([1])})},
                     edges=[("input", "fc"), ("fc", "lif"), ("lif", "output")])
    out, _ = simulate_float(to_chain(g), np.array([[0.3]]), DT, steps=20)
    v, count = 0.0, 0
    for _ in range(20):
        v = 0.9 * v + 0.3
        if v > 1:
            count, v = count + 1, 0.0
    assert out[0, 0] == count == 5


@pytest.mark.parametrize("readout", ["LI", "CubaLIF", "IF", "I"])
def test_fixed_point_network_follows_the_float_graph(readout, x):
    chain = to_chain(chain_graph(readout))
    fixed = quantize(chain, DT, 16, x)
    check = compare(chain, fixed.net, x, DT)
    assert not any(check["overflow"].values())
    assert check["argmax_agreement"] >= 0.8, check  # spikes are thresholds: a rounding can move one
    if readout in ("LI", "I"):
        assert check["output_sqnr_db"] > 15, check


def test_layer_decays_and_thresholds_land_in_lava_lif_ranges(x):
    fixed = quantize(to_chain(chain_graph("CubaLIF")), DT, 16, x)
    hidden, out = fixed.net.layers
    assert hidden.cuba == {"i_decay": 4096, "v_decay": 410}  # LIF: no current memory, dt/tau = 0.1
    assert out.cuba == {"i_decay": 205, "v_decay": 410}  # CubaLIF: tau_syn twice tau_mem
    for lyr in fixed.net.layers:
        assert 1 <= lyr.vth <= 2 ** 17 - 1 and np.abs(lyr.weight).max() <= 127 and np.abs(lyr.bias).max() <= 4095


def test_the_pass_writes_a_netx_file_the_reference_reads_back(tmp_path, x):
    path = _write(chain_graph("LI"), tmp_path / "g.nir")
    art, report = run_passes(Artifact("nir", path=path, meta={"nir": {"dt": DT, "steps": 12}}), [ImportNirConfig()],
                             PassContext(workdir=tmp_path / "w", calibration=x))
    net = netx_format.NetxNet.load(art.path)
    assert art.format == "netx" and net.cuba and net.steps_per_sample == 12 and net.readout == "voltage"
    extra = report[0].extra
    assert extra["dt"] == DT and extra["float_vs_fixed"]["argmax_agreement"] >= 0.8


def _refused(tmp_path, graph, *needles):
    with pytest.raises(EdgesmithError) as info:
        load_chain(_write(graph, tmp_path / "bad.nir"))
    for n in needles:
        assert n in str(info.value)


def test_unsupported_nodes_are_refused_by_name(tmp_path):
    import nir

    def delay(nodes, edges):
        nodes["delay1"] = nir.Delay(delay=np.ones(8))
        edges.remove(("input", "fc1"))
        edges += [("input", "delay1"), ("delay1", "fc1")]

    _refused(tmp_path, chain_graph("LI", extra=delay, type_check=False), "'delay1' (Delay)")


def test_recurrent_edges_branches_and_non_zero_resets_are_refused(tmp_path):
    import nir

    def recurrent(nodes, edges):
        nodes["rec"] = nir.Linear(weight=np.eye(20) * 0.1)
        edges += [("lif1", "rec"), ("rec", "lif1")]

    _refused(tmp_path, chain_graph("LI", extra=recurrent), "'lif1'")

    def reset(nodes, edges):
        p = lif_params(20)
        p["v_reset"] = np.full(20, -0.5)
        nodes["lif1"] = nir.LIF(**p)

    _refused(tmp_path, chain_graph("LI", extra=reset), "'lif1'", "v_reset")

    def per_neuron_tau(nodes, edges):
        p = lif_params(20)
        p["tau"] = np.linspace(1e-3, 2e-3, 20)
        nodes["lif1"] = nir.LIF(**p)

    with pytest.raises(EdgesmithError, match="one decay per layer"):
        quantize(to_chain(chain_graph("LI", extra=per_neuron_tau)), DT, 16, np.ones((4, 8)))


def test_an_unreadable_file_is_named(tmp_path):
    bad = tmp_path / "broken.nir"
    bad.write_bytes(b"not hdf5")
    with pytest.raises(EdgesmithError, match="broken.nir"):
        load_chain(bad)


@pytest.mark.lava
@pytest.mark.parametrize("readout", ["LI", "CubaLIF"])
def test_lava_runs_the_imported_network_bit_exact(readout, tmp_path, x):
    from edgesmith.runtimes import get_runtime

    path = _write(chain_graph(readout), tmp_path / "g.nir")
    art, _ = run_passes(Artifact("nir", path=path, meta={"nir": {"dt": DT, "steps": 8}}), [ImportNirConfig()],
                        PassContext(workdir=tmp_path / "w", calibration=x))
    xs = x[:6].astype(np.float32)
    ref = get_runtime("netx-ref").load(art).run(xs)
    lava = get_runtime("lava").load(art).run(xs)
    np.testing.assert_array_equal(lava.named["output_int"], ref.named["output_int"])
    for k in ("synops", "messages", "neuron_updates"):
        assert lava.stats[k] == ref.stats[k]


def _conv_graph(extra_pool: bool = True):
    """Input (1, 8, 8) -> Conv2d 4x3x3 (padding 1) -> LIF -> SumPool2d 2 -> Flatten -> Affine -> LI."""
    import nir

    rng = np.random.default_rng(3)
    nodes = {"input": nir.Input(input_type={"input": np.array([1, 8, 8])}),
             "conv": nir.Conv2d(input_shape=(8, 8), weight=rng.normal(0, 0.5, (4, 1, 3, 3)), stride=1, padding=1,
                                dilation=1, groups=1, bias=rng.normal(0, 0.05, 4)),
             "lif_c": nir.LIF(**lif_params(4 * 8 * 8)),
             "pool": nir.SumPool2d(kernel_size=np.array([2, 2]), stride=np.array([2, 2]), padding=np.array([0, 0])),
             "flat": nir.Flatten(input_type={"input": np.array([4, 4, 4])}, start_dim=0),
             "fc": nir.Affine(weight=rng.normal(0, 0.3, (3, 64)), bias=np.zeros(3)),
             "li": nir.LI(tau=np.full(3, 1e-3), r=np.full(3, 10.0), v_leak=np.zeros(3)),
             "output": nir.Output(output_type={"output": np.array([3])})}
    edges = [("input", "conv"), ("conv", "lif_c"), ("lif_c", "pool"), ("pool", "flat"), ("flat", "fc"),
             ("fc", "li"), ("li", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


def test_convolutions_and_pooling_lower_to_the_maps_torch_computes():
    import torch.nn.functional as F

    g = _conv_graph()
    chain = to_chain(g)
    assert chain.input_shape == (1, 8, 8) and [lyr.n_out for lyr in chain.layers] == [256, 3]
    img = np.random.default_rng(4).normal(size=(2, 1, 8, 8))
    conv = F.conv2d(torch.as_tensor(img), torch.as_tensor(g.nodes["conv"].weight), torch.as_tensor(g.nodes["conv"].bias),
                    padding=1).reshape(2, -1).numpy()
    np.testing.assert_allclose(img.reshape(2, -1) @ chain.layers[0].weight.T + chain.layers[0].bias, conv, atol=1e-12)
    # sum pooling then the Affine compose into the second layer's matrix
    spikes = (np.random.default_rng(5).random((2, 4, 8, 8)) > 0.5).astype(float)
    pooled = F.avg_pool2d(torch.as_tensor(spikes), 2).numpy().reshape(2, -1) * 4
    np.testing.assert_allclose(spikes.reshape(2, -1) @ chain.layers[1].weight.T, pooled @ g.nodes["fc"].weight.T,
                               atol=1e-12)
    # a convolution's matrix is sparse: 9 taps per output at most
    assert np.count_nonzero(chain.layers[0].weight) <= 9 * 256


@pytest.mark.lava
def test_a_convolutional_graph_runs_in_lava_bit_exact(tmp_path):
    from edgesmith.runtimes import get_runtime

    path = _write(_conv_graph(), tmp_path / "conv.nir")
    x = np.random.default_rng(6).uniform(0, 1, (16, 1, 8, 8))
    art, _ = run_passes(Artifact("nir", path=path, meta={"nir": {"dt": DT, "steps": 6}}), [ImportNirConfig()],
                        PassContext(workdir=tmp_path / "w", calibration=x))
    xs = x[:4].astype(np.float32)
    ref = get_runtime("netx-ref").load(art).run(xs)  # images in: the runtimes flatten them
    lava = get_runtime("lava").load(art).run(xs)
    np.testing.assert_array_equal(lava.named["output_int"], ref.named["output_int"])
    assert lava.stats["synops"] == ref.stats["synops"] > 0
