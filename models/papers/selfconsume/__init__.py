"""Self-consuming generative loops under noisy / adversarial curation (paper 8), at 2-D toy scale."""
