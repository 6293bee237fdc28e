"""Model sources: what ``edgesmith deploy SOURCE`` accepts besides registered producer names.

Registration: one line per source module in ``SOURCE_MODULES``, imported on the first query, tried in
this order (the first whose ``matches`` accepts SOURCE loads it).
"""
SOURCE_MODULES = (
    "edgesmith.bench.sources.onnx_file",  # onnx: model.onnx
    "edgesmith.bench.sources.torch_factory",  # torch-factory: file.py:factory
    "edgesmith.bench.sources.torchscript",  # torchscript: model.pt / .ts
    "edgesmith.bench.sources.torch_export",  # torch-export: model.pt2
    "edgesmith.bench.sources.rwkv_checkpoint",  # rwkv-checkpoint: official RWKV-6/7 .pth
    "edgesmith.bench.sources.edgesmith_rwkv",  # edgesmith-rwkv-quantized: a quantized RWKV .pth edgesmith wrote
    "edgesmith.bench.sources.tree_ensemble",  # tree-ensemble: a saved GBRL ensemble (.npz)
    "edgesmith.bench.sources.netx_file",  # netx: a netx HDF5 Sigma-Delta network (.net / .h5)
    "edgesmith.bench.sources.nir_file",  # nir: a NIR graph of LIF-family neurons (.nir)
)
