"""Hardware targets: formats, memory budget, runtime and a cost model with cited coefficients.

Registration: one import line per target module below.
"""
from hardware.base import (
    Coefficient, CostModel, Estimate, Plan, PlanOptions, Target, Variant, Workload, get_target, register_target,
    target_names,
)

from hardware import host_cpu  # noqa: F401  (registers host-cpu)
from hardware import jetson_orin_nano  # noqa: F401  (registers jetson-orin-nano)
from hardware import loihi2  # noqa: F401  (registers loihi2)

__all__ = ["Coefficient", "CostModel", "Estimate", "Plan", "PlanOptions", "Target", "Variant", "Workload",
           "get_target", "register_target", "target_names"]
