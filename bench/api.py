"""The Python API (``import edgesmith``): the CLI's commands as functions. Filled in with the one pipeline."""
