"""Hardware targets: formats, memory budget, runtime and a cost model with cited coefficients.

Registration: one line per target module in ``TARGET_MODULES``, imported on the first registry query
(the same pattern as producers, passes and runtimes).
"""
from edgesmith.hardware.base import (
    Coefficient, CostModel, Estimate, Plan, PlanOptions, Target, Variant, Workload, get_target, register_target,
    target_names,
)

TARGET_MODULES = (
    "edgesmith.hardware.host_cpu",  # host-cpu
    "edgesmith.hardware.jetson_orin_nano",  # jetson-orin-nano
    "edgesmith.hardware.loihi2",  # loihi2
)

__all__ = ["Coefficient", "CostModel", "Estimate", "Plan", "PlanOptions", "Target", "Variant", "Workload",
           "get_target", "register_target", "target_names"]
