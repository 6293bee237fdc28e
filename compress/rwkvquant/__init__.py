"""RWKV quantization: RTN, GPTQ, GPTVQ and RWKVQuant in one framework (passes rwkv-rtn, rwkv-gptq,
rwkv-gptvq, rwkvquant), exact bit accounting, exact save/reload, ONNX export of the decode step."""
from edgesmith.compress.rwkvquant.qcheckpoint import load_quantized, save_quantized
from edgesmith.compress.rwkvquant.rwkvquant import (GPTQConfig, GPTVQConfig, RTNConfig, RWKVQuantConfig, make_config,
                                          quantize_rwkv)

__all__ = ["GPTQConfig", "GPTVQConfig", "RTNConfig", "RWKVQuantConfig", "make_config", "quantize_rwkv",
           "load_quantized", "save_quantized"]
