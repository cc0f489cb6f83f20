"""Inference: calling the model and reading what it says."""
