"""Training loops (pretraining, fine-tuning) and what they share: schedules, checkpoints, tracking."""
