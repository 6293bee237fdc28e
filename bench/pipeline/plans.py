"""A deploy's plan: the target's own, plus the runtimes the user asked for (``PlanOptions.runtimes``).

Targets (``hardware``) decide variants without knowing what each runtime loads; adding a runtime to a plan needs
the runtimes' formats and the options each wants in a pass (``Runtime.pass_options``), so it happens here.
"""
from __future__ import annotations

import dataclasses

from edgesmith.common import EdgesmithError
from edgesmith.hardware import Plan, PlanOptions, Variant
from edgesmith.runtimes.base import RUNTIMES


def deploy_plan(target, producer, options: PlanOptions) -> Plan:
    """``target``'s plan for ``producer`` with the asked-for runtimes joined (``with_runtimes``)."""
    return with_runtimes(target, target.plan(producer, options), producer, options.runtimes)


def with_runtimes(target, plan: Plan, producer, names: tuple[str, ...]) -> Plan:
    """``plan`` with each runtime in ``names`` added to every variant whose file it loads (a format its primary
    runtime loads). A variant with a pass the runtime wants other options in (``pass_options``) gets a copy built
    with them, ``VARIANT-RUNTIME``, run only there. A runtime the producer rules out is left out; the notes say
    which variants each runs."""
    if names and target.latency_provenance != "measured":
        raise EdgesmithError(f"{target.name} estimates its latency with a cost model, so runtime(s) "
                             f"{', '.join(names)} would time this machine, not the {target.name}.",
                             "ask for more runtimes on a target measured here (host-cpu).")
    ruled_out = producer.unsupported_runtimes() if hasattr(producer, "unsupported_runtimes") else {}
    for name in names:
        cls = RUNTIMES.get(name)  # an unknown name: one error listing the registered runtimes
        loads = set(cls.formats)
        if name in ruled_out:
            plan.notes.append(f"runtime {name} left out for this model: {ruled_out[name]}")
            continue
        joined = []
        for v in list(plan.variants):
            if name in v.runtimes or not loads & set(RUNTIMES.get(v.runtimes[0]).formats):
                continue
            wanted = {p.kind: cls.pass_options[p.kind] for p in v.passes if p.kind in cls.pass_options}
            if not wanted:
                v.runtimes = [*v.runtimes, name]  # a new list: plans may share one between variants
                joined.append(v.name)
                continue
            passes = [dataclasses.replace(p, **wanted[p.kind]) if p.kind in wanted else p for p in v.passes]
            told = "; ".join(f"{k} with {', '.join(f'{o}={x!r}' for o, x in opts.items())}" for k, opts in wanted.items())
            copy = Variant(f"{v.name}-{name}", passes, [name], f"{v.description}, built as {name} takes it ({told})")
            plan.variants.insert(plan.variants.index(v) + 1, copy)
            joined.append(copy.name)
        plan.notes.append(f"runtime {name} (asked for) runs " + (", ".join(joined) if joined else
                          f"none of these variants: it loads {', '.join(sorted(loads))} files"))
    return plan
