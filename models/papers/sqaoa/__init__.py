"""SQAOA (paper 1): sub-problem QAOA for correlation clustering, simulated here with a statevector."""
