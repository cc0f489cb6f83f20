"""Agents: the Agent record, the World, the one loop every agent runs, a subagent's run, talk.

The design: docs/ARCHITECTURE.md, Agent and World; wait is talk's."""
