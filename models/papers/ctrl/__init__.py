"""Paper 10 (CTRL): a critic trained by SFT then GRPO to steer a fixed generator in toy program repair."""
