"""PyTorch eager: the fp32 reference every other backend is compared with."""
from __future__ import annotations

import numpy as np
import torch

from edgesmith.compress.base import Artifact
from edgesmith.runtimes.base import Runtime, register_runtime


@register_runtime
class TorchEager(Runtime):
    name = "torch"
    contract_fixture = "mlp-torch"
    formats = ("torch",)
    description = "PyTorch eager mode on the CPU (fp32 reference)"

    def _load(self, artifact: Artifact) -> None:
        self.module_ = artifact.module.eval()

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        prev = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(int(self.threads))
        try:
            with torch.inference_mode():
                out = self.module_(torch.from_numpy(x))
            if isinstance(out, (tuple, list)):  # e.g. (logits, state) of a recurrent model: the first output
                out = out[0]
            out = out.numpy()
        finally:
            torch.set_num_threads(prev)
        return out, {"threads": self.threads or prev}
