"""Model producers: each builds a small model plus its calibration data, inputs and metric.

Registration: one line per producer module in ``PRODUCER_MODULES``. The modules are imported on
the first registry query, not at ``import models``, so a process that only needs ``models.common``
(a latency worker timing an onnxruntime model, say) does not pay for torch.
"""
from models.base import Evaluation, Metric, Producer, get_producer, producer_names, register_producer
from models.common import EdgesmithError

PRODUCER_MODULES = (
    "models.digits",  # digits-mlp, digits-wide
    "models.gbrl.producer",  # gbrl-cartpole
    "models.rwkv.producer",  # rwkv6-ref, rwkv7-ref
    "models.lrnn.producer",  # lrnn-denoiser
    "models.ncvsd.producer",  # ncvsd
    "models.eqvae.producer",  # eqvae
    "models.sqaoa.producer",  # sqaoa
    "models.selfconsume.producer",  # self-consuming
    "models.eflanding.producer",  # ef-landing-pca
    "models.dpfl.producer",  # dpfl-logreg
    "models.wavegc.producer",  # wavegc
    "models.gnn_causal.producer",  # gnn-iia
    "models.ood.producer",  # ood-gauss
    "models.tsv.producer",  # tsv-rwkv
    "models.influence.producer",  # noise-cnn
    "models.ctrl.producer",  # ctrl-critic
    "models.scaling.producer",  # scaling-student
    "models.founder.producer",  # founder
    "models.skew.producer",  # skew-spectrum
    "models.medtok.producer",  # medtok
)

__all__ = ["Evaluation", "Metric", "Producer", "EdgesmithError", "get_producer", "producer_names", "register_producer"]
