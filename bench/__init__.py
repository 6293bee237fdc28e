"""Honest measurement and the user-facing pipeline: latency, memory, energy, reports, deploy, CLI."""
