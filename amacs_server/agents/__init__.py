"""Agents and the World (docs/ARCHITECTURE.md, Agent and World): the Agent record, the World,
the one loop every agent runs, a subagent's run, talk and wait."""
