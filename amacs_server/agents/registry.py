"""Every agent of a session, and the indexes kept beside them (docs/ARCHITECTURE.md, Agent and World).

The registry is who is who: it finds an agent by its id (refusing, in words
the calling agent reads, one that is not there or not live), walks the tree of
parents, and keeps the indexes a model call and a new agent consult (the
compulsions watching an agent; the subagents not yet seen ended), so neither
scans every agent.  It needs nothing of the runtime: the World
(``world.py``) is a registry that also acts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..persistence.transcript import AgentIdentity
from .agent import Agent, AgentError
from .kinds import PRIMARY, AgentState, AgentType


class Registry:
    """Every agent, ended ones too, in the order they were made; the primary first."""

    def __init__(self, primary: Agent) -> None:
        self.primary = primary
        self.agents: dict[str, Agent] = {PRIMARY: primary}
        # Indexes kept beside ``agents`` (which keeps every agent, ended ones too): each
        # model call asks for its agent's compulsions and each new agent counts the live
        # ones; neither scans every agent, so a model call costs the same with 1 or 100 agents.
        self._maybe_live: dict[str, Agent] = {}  # subagents not yet seen ended
        self._compulsions: dict[str, list[Agent]] = {}  # by the agent they watch

    def _register(self, agent: Agent) -> None:
        """AGENT joins: a compulsion watches its parent."""
        self.agents[agent.id] = agent
        self._maybe_live[agent.id] = agent
        if agent.type is AgentType.COMPULSION:
            self._compulsions.setdefault(agent.parent, []).append(agent)

    def _live_count(self, limit: int) -> int:
        """The live subagents, counted again (ended ones dropped) only when near LIMIT."""
        if len(self._maybe_live) >= limit:
            self._maybe_live = {i: a for i, a in self._maybe_live.items() if a.state.live}
        return len(self._maybe_live)

    def identity(self, agent_id: str) -> AgentIdentity:
        """The transcript identity of AGENT_ID."""
        agent = self.agents.get(agent_id)
        return agent.identity if agent else AgentIdentity()

    def depth(self, agent_id: str) -> int:
        """How deep AGENT_ID is below the primary."""
        return self.agents[agent_id].depth if agent_id in self.agents else 0

    def _caller(self, agent_id: str, action: str) -> Agent | None:
        if agent_id == PRIMARY:
            return None
        agent = self.agents.get(agent_id)
        if agent is None or agent.state in (AgentState.DISCARDED, AgentState.QUIT):
            raise AgentError(f"{agent_id} is not a live agent")
        if action not in agent.allowed:
            raise AgentError(f"{agent_id} ({agent.type} {agent.template}) may not use the {action} action; "
                             f"allowed: {', '.join(sorted(agent.allowed))}")
        return agent

    def lineage(self, agent_id: str) -> list[Agent]:
        """AGENT_ID, its parent, and so on up to the primary."""
        out: list[Agent] = []
        agent = self.agents.get(agent_id)
        while agent is not None and agent not in out:
            out.append(agent)
            agent = self.agents.get(agent.parent) if agent.parent else None
        return out

    def subtree(self, agent_id: str) -> list[Agent]:
        """AGENT_ID and every agent below it."""
        out, todo = [], [agent_id]
        while todo:
            current = todo.pop()
            agent = self.agents.get(current)
            if agent is not None:
                out.append(agent)
            todo.extend(a.id for a in self.agents.values() if a.parent == current)
        return out

    def _ancestors(self, agent_id: str) -> list[str]:
        out, agent = [], self.agents.get(agent_id)
        while agent is not None and agent.parent != PRIMARY:
            out.append(agent.parent)
            agent = self.agents.get(agent.parent)
        return out

    def _live(self, agent_id: str) -> Agent:
        agent = self._subagent(agent_id)
        if not agent.state.live:
            raise AgentError(f"{agent.id} has already ended ({agent.state})")
        return agent

    def _subagent(self, agent_id: str) -> Agent:
        """AGENT_ID, an agent below the primary: the primary is talked to in the shell and
        stopped with C-c C-c there."""
        if agent_id == PRIMARY:
            raise AgentError("the primary is talked to in the shell, and C-c C-c there interrupts it")
        return self._known(agent_id)

    def subagents(self) -> Iterator[Agent]:
        """Every agent but the primary, in the order they were made."""
        return (a for a in self.agents.values() if a is not self.primary)

    def _known(self, agent_id: str) -> Agent:
        agent = self.agents.get(agent_id)
        if agent is None:
            raise AgentError(f"no agent {agent_id!r}")
        return agent

    def viewpoints_of(self, caller: str) -> list[Agent]:
        """CALLER's live viewpoints, in the order they were made."""
        return [a for a in self.agents.values() if a.type is AgentType.VIEWPOINT and a.parent == caller
                and a.state is not AgentState.DISCARDED]

    def compulsions_of(self, agent_id: str) -> list[Agent]:
        """The compulsions watching AGENT_ID now: live, and not paused by the person (a paused
        one is not asked, so it never holds the agent it watches)."""
        attached = self._compulsions.get(agent_id)
        if not attached:
            return []
        attached[:] = [a for a in attached if a.state.live]
        return [a for a in attached if a.resumed.is_set()]

    def live(self) -> list[dict[str, Any]]:
        """Summaries of the subagents that are not finished."""
        return [a.summary() for a in self.subagents() if a.state.live]

    def everyone(self) -> list[dict[str, Any]]:
        """Summaries of every agent of this session, the primary first, in the order they were made.

        A stable order: the hub redraws under the person's point, and a key must act on
        the agent the person chose (live ones first made rows move)."""
        return [a.summary() for a in self.agents.values()]
