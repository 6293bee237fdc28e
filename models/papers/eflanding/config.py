"""Settings of one EF-Landing run (validated on construction, JSON round trip)."""
from __future__ import annotations

from dataclasses import dataclass

from edgesmith.common import Config
from edgesmith.models.papers.distributed.compressors import EF_MODES, make_compressor

MESSAGES = ("gradient", "field")


@dataclass(frozen=True)
class EFLandingConfig(Config):
    """Distributed PCA by EF-Landing.

    ``message``: what each worker compresses. ``gradient`` (DEFAULT): eta * its local Euclidean
    gradient; the averaged (decompressed) message M enters the landing step
    X <- X - skew(M X^T) X - eta lambda X (X^T X - I), the normal term computed exactly from the
    replicated X. ``field``: eta * its whole local landing field (normal term included, although it is
    the same on every worker). ``ef_mode``: ``ef21`` (DEFAULT for this producer: on these
    deterministic local gradients it reaches the uncompressed optimum; measured in the claim),
    ``ef14`` (the notes' form m = C(e + eta g), e += eta g - m), ``none``. ``blocks``: column split of
    X into blocks, each on its own Stiefel manifold with its own landing term (``()`` = one block).
    Local gradients are full local-batch gradients (deterministic distributed PCA).
    """

    n: int = 50
    p: int = 5
    workers: int = 4
    samples_per_worker: int = 500
    iters: int = 1500
    eta: float = 0.2
    lam: float = 1.0
    compressor: str = "topk:0.1"
    ef_mode: str = "ef21"
    message: str = "gradient"
    blocks: tuple = ()
    log_every: int = 25
    seed: int = 0

    def validate(self) -> None:
        if not 1 <= self.p <= self.n:
            self._fail("p", f"is {self.p} with n = {self.n}", "use 1 <= p <= n (a Stiefel matrix is n x p).")
        for name in ("workers", "samples_per_worker", "iters", "log_every"):
            if int(getattr(self, name)) < 1:
                self._fail(name, f"is {getattr(self, name)}", "use a positive integer.")
        if not self.eta > 0 or not self.lam > 0:
            self._fail("eta/lam", f"are {self.eta}/{self.lam}", "use positive step size and landing strength.")
        make_compressor(self.compressor)  # raises a readable error on a bad spec
        if self.ef_mode not in EF_MODES:
            self._fail("ef_mode", f"is {self.ef_mode!r}", f"use one of: {', '.join(EF_MODES)}.")
        if self.message not in MESSAGES:
            self._fail("message", f"is {self.message!r}", f"use one of: {', '.join(MESSAGES)}.")
        if self.blocks and (sum(self.blocks) != self.p or min(self.blocks) < 1):
            self._fail("blocks", f"{tuple(self.blocks)} do not split p = {self.p} columns",
                       "give positive block widths that add up to p, or () for one block.")

    def block_sizes(self) -> tuple[int, ...]:
        return tuple(self.blocks) if self.blocks else (self.p,)
