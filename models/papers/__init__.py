"""Paper producers: one folder per ICML 2025 paper whose model feeds the deploy pipeline.

Each folder reproduces its paper's method at a small size and registers a producer; the toolkit's
core (compress -> hardware -> runtimes -> bench) never imports these modules by name. A new paper
is one folder here plus one line in ``PAPER_PRODUCER_MODULES``. ``distributed/`` is not a paper:
it is the torch.distributed plumbing that EF-Landing and DP-FL train with.
"""

PAPER_PRODUCER_MODULES = (
    "edgesmith.models.papers.ncvsd.producer",  # ncvsd
    "edgesmith.models.papers.eqvae.producer",  # eqvae
    "edgesmith.models.papers.sqaoa.producer",  # sqaoa
    "edgesmith.models.papers.selfconsume.producer",  # self-consuming
    "edgesmith.models.papers.eflanding.producer",  # ef-landing-pca
    "edgesmith.models.papers.dpfl.producer",  # dpfl-logreg
    "edgesmith.models.papers.wavegc.producer",  # wavegc
    "edgesmith.models.papers.gnn_causal.producer",  # gnn-iia
    "edgesmith.models.papers.ood.producer",  # ood-gauss
    "edgesmith.models.papers.tsv.producer",  # tsv-rwkv
    "edgesmith.models.papers.influence.producer",  # noise-cnn
    "edgesmith.models.papers.ctrl.producer",  # ctrl-critic
    "edgesmith.models.papers.scaling.producer",  # scaling-student
    "edgesmith.models.papers.founder.producer",  # founder
    "edgesmith.models.papers.skew.producer",  # skew-spectrum
    "edgesmith.models.papers.medtok.producer",  # medtok
)
