"""Fine-tuning a pretrained encoder on a downstream task: heads, task adapters, the loop."""
