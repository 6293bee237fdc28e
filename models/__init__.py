"""Model producers: each builds a small model plus its calibration data, inputs and metric.

Registration: one line per producer module in ``PRODUCER_MODULES``. The modules are imported on
the first registry query, not at ``import models``, so a process that only needs ``models.common``
(a latency worker timing an onnxruntime model, say) does not pay for torch.
"""
from edgesmith.models.base import Evaluation, Metric, Producer, get_producer, producer_names, register_producer
from edgesmith.common import EdgesmithError

PRODUCER_MODULES = (
    "edgesmith.models.digits",  # digits-mlp, digits-wide
    "edgesmith.models.gbrl.producer",  # gbrl-cartpole
    "edgesmith.models.rwkv.producer",  # rwkv6-ref, rwkv7-ref
    "edgesmith.models.lrnn.producer",  # lrnn-denoiser
    "edgesmith.models.ncvsd.producer",  # ncvsd
    "edgesmith.models.eqvae.producer",  # eqvae
    "edgesmith.models.sqaoa.producer",  # sqaoa
    "edgesmith.models.selfconsume.producer",  # self-consuming
    "edgesmith.models.eflanding.producer",  # ef-landing-pca
    "edgesmith.models.dpfl.producer",  # dpfl-logreg
    "edgesmith.models.wavegc.producer",  # wavegc
    "edgesmith.models.gnn_causal.producer",  # gnn-iia
    "edgesmith.models.ood.producer",  # ood-gauss
    "edgesmith.models.tsv.producer",  # tsv-rwkv
    "edgesmith.models.influence.producer",  # noise-cnn
    "edgesmith.models.ctrl.producer",  # ctrl-critic
    "edgesmith.models.scaling.producer",  # scaling-student
    "edgesmith.models.founder.producer",  # founder
    "edgesmith.models.skew.producer",  # skew-spectrum
    "edgesmith.models.medtok.producer",  # medtok
    "edgesmith.models.lavadl.producer",  # lavadl-digits (trained by lava-dl in the Lava env)
)

__all__ = ["Evaluation", "Metric", "Producer", "EdgesmithError", "get_producer", "producer_names", "register_producer"]
