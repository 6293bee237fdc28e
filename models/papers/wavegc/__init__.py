"""WaveGC (wavelet graph convolution, ICML 2025) at small scale: learned admissible graph wavelets."""
