"""OOD detection with a supervised classifier (paper 6): scores, the Gaussian toy problem, producer ``ood-gauss``."""
