"""Text formats the agent's words pass through (org markup for replies)."""
