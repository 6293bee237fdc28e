"""Energy: measured with RAPL where the kernel exposes it, otherwise estimated by a target's cost model.

``RaplReader`` reads the Linux powercap sysfs tree (``/sys/class/powercap``): Intel's
``intel-rapl:N`` package zones and their ``intel-rapl:N:M`` subzones (core, uncore, dram), and the
``amd-rapl`` naming some kernels use on AMD parts. Each zone's ``energy_uj`` is a counter that wraps
at ``max_energy_range_uj``; one wrap between two reads is undone, several cannot be detected, so
keep measured intervals short (a package counter wraps after minutes at full load).

``energy_figure`` returns one figure that is either ``measured`` (with the method) or ``estimated``
(with the cost model and its cited coefficients): never a mix of the two.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edgesmith.hardware.base import Target, Workload, get_target
from edgesmith.common import EdgesmithError

METHOD = "RAPL powercap sysfs"
_ZONE_RE = re.compile(r"^(intel|amd)-rapl:(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class RaplZone:
    """One powercap zone: ``zone_id`` like ``intel-rapl:0`` (package) or ``intel-rapl:0:1`` (subzone)."""

    zone_id: str
    path: Path
    name: str
    max_energy_range_uj: int

    @property
    def is_package(self) -> bool:
        return self.zone_id.count(":") == 1


@dataclass
class EnergyMeasurement:
    """Energy drawn while a function ran, read from hardware counters on this machine."""

    energy_j: float  # sum over top-level package zones (subzones are inside them; psys is excluded)
    seconds: float
    zones: dict[str, float] = field(default_factory=dict)  # zone id -> joules, packages and subzones
    zone_names: dict[str, str] = field(default_factory=dict)
    result: Any = None
    provenance: str = "measured"
    method: str = METHOD

    def to_dict(self) -> dict:
        return {"provenance": self.provenance, "method": self.method, "energy_j": self.energy_j,
                "seconds": self.seconds, "zones_j": dict(self.zones), "zone_names": dict(self.zone_names)}


class RaplReader:
    """Reads RAPL energy counters from a powercap sysfs tree (a fixture tree in tests)."""

    def __init__(self, root: str | Path = "/sys/class/powercap"):
        self.root = Path(root)

    def zones(self) -> list[RaplZone]:
        """Every RAPL zone under ``root``, packages first, in numeric order."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in self.root.iterdir():
            m = _ZONE_RE.match(entry.name)
            if not m or not entry.is_dir():
                continue
            name_file = entry / "name"
            name = _read_text(name_file).strip() if name_file.exists() else entry.name
            found.append((int(m.group(2)), -1 if m.group(3) is None else int(m.group(3)),
                          RaplZone(entry.name, entry, name, _read_int(entry / "max_energy_range_uj"))))
        return [z for *_, z in sorted(found, key=lambda t: (t[0], t[1]))]

    def available(self) -> bool:
        """True when at least one package zone has a readable energy counter."""
        try:
            return any(z.is_package for z in self.zones()) and bool(self.read())
        except EdgesmithError:
            return False

    def read(self) -> dict[str, int]:
        """Current ``energy_uj`` of every zone."""
        return {z.zone_id: _read_int(z.path / "energy_uj") for z in self.zones()}

    def measure(self, fn: Callable, *args, **kwargs) -> EnergyMeasurement:
        """Run ``fn(*args, **kwargs)`` between two counter reads and return the energy it drew."""
        zones = self.zones()
        if not any(z.is_package for z in zones):
            raise EdgesmithError(
                f"no RAPL package zone under {self.root}: energy cannot be measured on this machine.",
                "run on a machine with the powercap interface (intel_rapl driver) or use the estimated figure.")
        before = self.read()
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        seconds = time.perf_counter() - t0
        after = self.read()
        joules = {z.zone_id: counter_delta(before[z.zone_id], after[z.zone_id], z.max_energy_range_uj) * 1e-6
                  for z in zones}
        package = sum(joules[z.zone_id] for z in zones if z.is_package and z.name != "psys")
        return EnergyMeasurement(energy_j=package, seconds=seconds, zones=joules,
                                 zone_names={z.zone_id: z.name for z in zones}, result=result)


def counter_delta(before: int, after: int, max_range: int) -> int:
    """Microjoules between two reads of a counter that wraps to 0 after ``max_range``."""
    if after >= before:
        return after - before
    if max_range <= 0 or before > max_range:
        raise EdgesmithError(f"energy counter went backwards ({before} -> {after} uJ) and its range "
                             f"({max_range} uJ) cannot explain a wrap.", "repeat the measurement.")
    return max_range - before + after


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise EdgesmithError(f"RAPL file {path} is missing.",
                             "check that the intel_rapl driver is loaded and the zone is complete.") from None
    except PermissionError:
        raise EdgesmithError(f"RAPL file {path} is not readable by this user.",
                             "run as root or grant read access (e.g. chmod o+r on energy_uj).") from None
    except OSError as e:
        raise EdgesmithError(f"RAPL file {path} could not be read ({e.strerror}).",
                             "check the powercap interface on this machine.") from None


def _read_int(path: Path) -> int:
    text = _read_text(path).strip()
    try:
        return int(text)
    except ValueError:
        raise EdgesmithError(f"RAPL file {path} holds {text[:40]!r}, not an integer.",
                             "check the powercap interface on this machine.") from None


def energy_figure(target: Target | str, workload: Workload, measured: EnergyMeasurement | None = None) -> dict:
    """One energy figure, labelled: ``measured`` (method, zones) or ``estimated`` (model, coefficients).

    With ``measured`` the counters' reading is returned and the cost model is not consulted; without
    it the target's cost model estimates the energy of one call of ``workload``.
    """
    if isinstance(target, str):
        target = get_target(target)
    if measured is not None:
        return {**measured.to_dict(), "target": target.name,
                "energy_j_per_sample": measured.energy_j / max(workload.batch, 1)}
    est = target.cost_model.estimate(workload)
    return {
        "provenance": "estimated",
        "target": target.name,
        "cost_model": est.model,
        "energy_j": est.energy_j,
        "energy_j_per_sample": est.energy_j / max(workload.batch, 1),
        "latency_s": est.latency_s,
        "latency_provenance": "measured" if workload.measured_latency_s is not None else "estimated",
        "breakdown": est.breakdown,
        "coefficients": [c.to_dict() for c in est.coefficients],
    }
