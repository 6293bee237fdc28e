"""RAPL reading on fixture powercap trees, and the measured-or-estimated energy figure."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgesmith.bench.measure.energy import EnergyMeasurement, RaplReader, counter_delta, energy_figure
from edgesmith.hardware import get_target
from edgesmith.hardware.base import Workload
from edgesmith.common import EdgesmithError

MAX_RANGE = 262143328850  # a typical package max_energy_range_uj


def _zone(root: Path, zone_id: str, name: str, energy: int, max_range: int = MAX_RANGE) -> Path:
    d = root / zone_id
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    return d


def _set(zone_dir: Path, energy: int) -> None:
    (zone_dir / "energy_uj").write_text(f"{energy}\n")


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "powercap"
    zones = {
        "pkg0": _zone(root, "intel-rapl:0", "package-0", 1_000_000),
        "core0": _zone(root, "intel-rapl:0:0", "core", 500_000),
        "dram0": _zone(root, "intel-rapl:0:1", "dram", 200_000),
        "pkg1": _zone(root, "intel-rapl:1", "package-1", 3_000_000),
    }
    (root / "intel-rapl").mkdir()  # the control-type directory, not a zone
    return root, zones


def test_discovers_packages_and_subzones_in_order(tree):
    root, _ = tree
    zones = RaplReader(root).zones()
    assert [z.zone_id for z in zones] == ["intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"]
    assert [z.is_package for z in zones] == [True, False, False, True]
    assert zones[0].name == "package-0" and zones[0].max_energy_range_uj == MAX_RANGE


def test_discovers_amd_rapl_naming(tmp_path):
    _zone(tmp_path, "amd-rapl:0", "package-0", 10)
    reader = RaplReader(tmp_path)
    assert [z.zone_id for z in reader.zones()] == ["amd-rapl:0"]
    assert reader.available()


def test_not_available_without_a_powercap_tree(tmp_path):
    assert RaplReader(tmp_path / "absent").available() is False
    (tmp_path / "empty").mkdir()
    assert RaplReader(tmp_path / "empty").available() is False


def test_measure_sums_packages_only_and_reports_subzones(tree):
    root, z = tree

    def work():
        _set(z["pkg0"], 1_000_000 + 2_500_000)
        _set(z["core0"], 500_000 + 1_000_000)
        _set(z["dram0"], 200_000 + 300_000)
        _set(z["pkg1"], 3_000_000 + 500_000)
        return "done"

    m = RaplReader(root).measure(work)
    assert m.result == "done"
    assert m.energy_j == pytest.approx(2.5 + 0.5)  # subzones are inside their package: not added again
    assert m.zones["intel-rapl:0:0"] == pytest.approx(1.0)
    assert m.zone_names["intel-rapl:0:1"] == "dram"
    assert (m.provenance, m.method) == ("measured", "RAPL powercap sysfs")
    assert m.seconds >= 0


def test_wraparound_between_reads_is_undone(tmp_path):
    pkg = _zone(tmp_path, "intel-rapl:0", "package-0", MAX_RANGE - 1_000)
    m = RaplReader(tmp_path).measure(lambda: _set(pkg, 500))
    assert m.energy_j == pytest.approx(1_500e-6)


def test_psys_zone_is_not_added_to_the_package_total(tmp_path):
    pkg = _zone(tmp_path, "intel-rapl:0", "package-0", 0)
    psys = _zone(tmp_path, "intel-rapl:1", "psys", 0)
    m = RaplReader(tmp_path).measure(lambda: (_set(pkg, 1_000_000), _set(psys, 5_000_000)))
    assert m.energy_j == pytest.approx(1.0)
    assert m.zones["intel-rapl:1"] == pytest.approx(5.0)


def test_counter_delta_rejects_an_impossible_backwards_step():
    assert counter_delta(10, 25, 100) == 15
    assert counter_delta(90, 5, 100) == 15
    with pytest.raises(EdgesmithError, match="backwards"):
        counter_delta(200, 5, 100)


def test_missing_energy_file_is_a_clear_error(tree):
    root, z = tree
    (z["pkg1"] / "energy_uj").unlink()
    with pytest.raises(EdgesmithError, match=r"intel-rapl:1/energy_uj is missing"):
        RaplReader(root).measure(lambda: None)


def test_unreadable_energy_file_is_a_clear_error(tree):
    root, z = tree
    (z["pkg0"] / "energy_uj").unlink()
    (z["pkg0"] / "energy_uj").mkdir()  # reading a directory fails even for root
    reader = RaplReader(root)
    with pytest.raises(EdgesmithError, match="could not be read"):
        reader.read()
    assert reader.available() is False


def test_garbled_energy_file_is_a_clear_error(tree):
    root, z = tree
    (z["pkg0"] / "energy_uj").write_text("n/a\n")
    with pytest.raises(EdgesmithError, match="not an integer"):
        RaplReader(root).read()


def test_measure_without_zones_says_how_to_proceed(tmp_path):
    with pytest.raises(EdgesmithError, match="no RAPL package zone"):
        RaplReader(tmp_path).measure(lambda: None)


def test_energy_figure_measured_carries_method_and_no_model():
    m = EnergyMeasurement(energy_j=2.0, seconds=0.5, zones={"intel-rapl:0": 2.0})
    fig = energy_figure("host-cpu", Workload(macs=1, batch=4), measured=m)
    assert fig["provenance"] == "measured" and fig["method"] == "RAPL powercap sysfs"
    assert fig["energy_j"] == 2.0 and fig["energy_j_per_sample"] == 0.5
    assert not {"cost_model", "coefficients", "breakdown"} & set(fig)


def test_energy_figure_estimated_names_model_and_cited_coefficients():
    target = get_target("loihi2")
    w = Workload(synops=1e5, neuron_updates=1e3, messages=10, timesteps=5, precision="fixed")
    fig = energy_figure(target, w)
    assert fig["provenance"] == "estimated"
    assert fig["cost_model"] == target.cost_model.name
    assert fig["energy_j"] == pytest.approx(target.cost_model.estimate(w).energy_j)
    assert fig["coefficients"] and all(c["source"] for c in fig["coefficients"])
    assert "method" not in fig and "zones_j" not in fig


def test_energy_figure_on_host_says_its_latency_was_measured():
    fig = energy_figure("host-cpu", Workload(macs=1e6, measured_latency_s=1e-3))
    assert (fig["provenance"], fig["latency_provenance"]) == ("estimated", "measured")
    assert fig["latency_s"] == 1e-3
