"""Hardware targets: formats, memory budget, runtime and a cost model with cited coefficients.

Registration: one import line per target module below.
"""
from hardware.base import (
    Coefficient, CostModel, Estimate, Plan, PlanOptions, Target, Variant, Workload, get_target, register_target,
    target_names,
)

__all__ = ["Coefficient", "CostModel", "Estimate", "Plan", "PlanOptions", "Target", "Variant", "Workload",
           "get_target", "register_target", "target_names"]
