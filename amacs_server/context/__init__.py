"""Context: the model's view of the agent's state, assembled each tick."""
