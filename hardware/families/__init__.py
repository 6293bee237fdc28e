"""Model-family plans: how a target deploys one family's models, kept out of the generic target files.

A target plans the kinds its own file knows (``Target.planners``); a family adds its plan for a (target, kind)
pair in its own module here with ``@register_plan(target, kind)``, registered by one line in
``FAMILY_PLAN_MODULES`` below. Nothing else in ``hardware/`` names a model family.
"""

FAMILY_PLAN_MODULES = (
    "edgesmith.hardware.families.rwkv",  # host-cpu token-lm: RWKV quantizers, step graphs and the C decoder
    "edgesmith.hardware.families.lrnn",  # host-cpu and loihi2 stream: the S5 denoiser pruned and in fixed point
)
