"""Measurement: latency (each artifact timed in a fresh worker process), resident memory, energy (RAPL when present,
else the target's cost model, labelled as estimated) and the OOD-score monitor."""
