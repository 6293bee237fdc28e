"""RWKV-6 and RWKV-7 language models: PyTorch implementation, official checkpoints, stdlib-text reference models."""
from edgesmith.models.rwkv.base import RWKVConfig, RWKVState, zero_state
from edgesmith.models.rwkv.checkpoint import build_model, load_rwkv, model_from_state_dict, save_rwkv
from edgesmith.models.rwkv.rwkv6 import RWKV6
from edgesmith.models.rwkv.rwkv7 import RWKV7

__all__ = ["RWKVConfig", "RWKVState", "RWKV6", "RWKV7", "build_model", "load_rwkv", "model_from_state_dict",
           "save_rwkv", "zero_state"]
