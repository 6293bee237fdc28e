"""GBRL: gradient-boosted trees as RL function approximators (Numba engine, PPO/A2C, exports)."""
from models.gbrl.ensemble import GBTEnsemble

__all__ = ["GBTEnsemble"]
