"""Model producers: each builds a small model plus its calibration data, inputs and metric.

Registration: one import line per producer module below.
"""
from models.base import Evaluation, Metric, Producer, get_producer, producer_names, register_producer
from models.common import EdgesmithError

from models import digits  # noqa: F401  (registers digits-mlp, digits-wide)

__all__ = ["Evaluation", "Metric", "Producer", "EdgesmithError", "get_producer", "producer_names", "register_producer"]
