"""Streaming speech denoising with an S5-style linear RNN (the sparse-LRNN-on-Loihi-2 study)."""
