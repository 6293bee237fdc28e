"""Model producers: each builds a small model plus its calibration data, inputs and metric.

Registration: one line per producer module in ``PRODUCER_MODULES``. The modules are imported on
the first registry query, not at ``import models``, so a process that only needs ``models.common``
(a latency worker timing an onnxruntime model, say) does not pay for torch.
"""
from edgesmith.models.base import Evaluation, Metric, Producer, get_producer, producer_names, register_producer
from edgesmith.common import EdgesmithError

from edgesmith.models.papers import PAPER_PRODUCER_MODULES

# the core producers; the paper producers are listed in models/papers/__init__.py
CORE_PRODUCER_MODULES = (
    "edgesmith.models.digits",  # digits-mlp, digits-wide
    "edgesmith.models.gbrl.producer",  # gbrl-cartpole
    "edgesmith.models.rwkv.producer",  # rwkv6-ref, rwkv7-ref
    "edgesmith.models.lrnn.producer",  # lrnn-denoiser
    "edgesmith.models.lavadl.producer",  # lavadl-digits (trained by lava-dl in the Lava env)
)
PRODUCER_MODULES = CORE_PRODUCER_MODULES + PAPER_PRODUCER_MODULES

__all__ = ["Evaluation", "Metric", "Producer", "EdgesmithError", "get_producer", "producer_names", "register_producer"]
