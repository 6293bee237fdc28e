"""Differentially private federated learning with partial participation and noise cancellation
(Reshef & Levy, ICML 2025) on top of mu^2-SGD, clients hosted by torchrun worker processes."""
