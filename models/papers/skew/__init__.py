"""The generalised skew spectrum of graphs (k-correlations on S_n as invariant pattern counts)."""
