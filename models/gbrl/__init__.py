"""GBRL: gradient-boosted trees as RL function approximators (Numba engine, PPO/A2C, exports)."""
from edgesmith.models.gbrl.ensemble import GBTEnsemble

__all__ = ["GBTEnsemble"]
