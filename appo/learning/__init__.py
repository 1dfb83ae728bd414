"""The learner: its core, its process shell, the batcher, data-parallel ranks, checkpoints."""
