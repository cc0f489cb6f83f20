"""Agents and the World (agent-world-architecture.md): tasks, viewpoints, compulsions, talk and wait."""
