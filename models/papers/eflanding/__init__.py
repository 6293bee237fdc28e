"""EF-Landing (Song, Li, Gao, Yuan; ICML 2025): retraction-free, communication-compressed distributed
optimization on the Stiefel manifold, here for distributed PCA over torchrun workers."""
