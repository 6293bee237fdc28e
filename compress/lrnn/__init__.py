"""Compression of the S5 denoiser: iterative magnitude pruning, w8a16 fixed-point conversion, exports."""
