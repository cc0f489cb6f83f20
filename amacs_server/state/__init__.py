"""The agent's state: consciousness and its rules."""
