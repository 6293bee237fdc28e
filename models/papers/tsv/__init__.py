"""TSV, the truthfulness separator vector (paper 18): synthetic fact world, method, producer ``tsv-rwkv``."""
