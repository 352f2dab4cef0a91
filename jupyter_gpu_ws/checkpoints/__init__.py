"""Kernel checkpoints: tracked training state saved at safe points, resumed exactly."""
