"""Goal-driven deploys: the user states an accuracy budget and an objective; edgesmith chooses the artifact.

``goal`` (the ``Goal`` config), ``choose`` (candidates, budget, cost, the pick), ``restore`` (layers back in higher
precision for a quantized variant that misses the budget), ``search`` (the whole decision over a deploy's rows) and
``write`` (decision.json / .md / .png and ``chosen/``).
"""
from edgesmith.bench.decide.goal import OBJECTIVES, Goal

__all__ = ["Goal", "OBJECTIVES"]
