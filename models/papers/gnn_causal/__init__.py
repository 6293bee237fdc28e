"""LLM feature enhancer + GNN, analysed by interchange intervention (ICML 2025), at small scale."""
