"""An agent: the record of one agent of the World (docs/ARCHITECTURE.md, Agent and World).

Every agent, the primary too, is an :class:`Agent`: its template, its place in
the tree (parent, depth), the actions and MCP tools it may use, its own
messages (a subagent's transcript) and its counters.  What it does is the
World's (``world.py``) and, for a subagent, its run (``subagent.py``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import AmacsError
from ..persistence.transcript import AgentIdentity
from .kinds import AgentState, AgentType, Ending
from .talk import TalkIds

if TYPE_CHECKING:
    from ..memory.active import ActiveMemory
    from ..memory.items import MemoryItem


class AgentError(AmacsError, ValueError):
    """An agent request the rules refuse; the message is for the calling agent."""


class AgentStopped(AmacsError, RuntimeError):
    """The agent may not go on: the budget is spent, or it was cancelled or interrupted."""


@dataclass
class Agent:
    """One subagent: its template, its own transcript, its counters."""

    id: str
    type: AgentType
    template: str
    parent: str
    depth: int
    name: str | None = None
    allowed: frozenset[str] = frozenset()
    tools: tuple[str, ...] = ()  # MCP tool patterns (`time/*'); a call needs this agent's and every ancestor's
    request_input: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)
    state: AgentState = AgentState.IDLE
    doing: str = ""  # while running: waiting for the model pool, thinking, an eval
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    talk_ids: TalkIds = field(default_factory=TalkIds)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    status: Ending | None = None  # how its last response ended
    model: str | None = None  # its template's `model:' (None: the session's model)
    budget_told: bool = False  # the person heard that the budget stopped it
    resumed: asyncio.Event = field(default_factory=asyncio.Event)  # cleared while paused
    memory: ActiveMemory | None = None  # its own RAM, made at its first memory call (tools/memory.py)
    memory_shown: dict[str, str] = field(default_factory=dict)  # base -> the item as its requests last showed it
    asked: int | None = None  # while a model call is out: how many of its messages that call shows

    def __post_init__(self) -> None:
        # A type or state given as its string (a test, a caller outside the World) becomes its member
        # here, once; an unknown one is an error now, not a comparison that is never true.
        try:
            self.type, self.state = AgentType(self.type), AgentState(self.state)
        except ValueError as err:
            raise AgentError(f"agent {self.id}: {err}") from err
        self.resumed.set()

    @property
    def identity(self) -> AgentIdentity:
        """Who this agent is, for transcripts."""
        return AgentIdentity(self.id, self.parent or None, self.type, self.template)

    def tell(self, text: str, *, as_item: bool = True, soon: bool = False) -> None:
        """Add TEXT to this agent's transcript as the next user message.

        With its own memory, TEXT is an item of it (no anonymous
        text reaches a brain: docs/ARCHITECTURE.md, Memory and MemIds), which the agent may evict and load; its request shows the
        item as it is then (:meth:`shown_messages`).  AS_ITEM false: TEXT is rendered items
        already (its ``<memory>`` section).  SOON: the item is committed at the end of this turn
        of the loop, with the others of the turn (:meth:`LongTermMemory.put`)."""
        part: str | MemoryItem = (self.memory.receive(text, soon=soon) if as_item and self.memory is not None
                                  else text)
        # Joined to the last message unless a model call out now shows it: then it is a message
        # of its own, which the answer is put before (:meth:`answered`).
        if self.messages and self.messages[-1]["role"] == "user" and (self.asked is None
                                                                       or len(self.messages) > self.asked):
            last = self.messages[-1]
            last.setdefault("parts", [last["content"]]).append(part)
            last["content"] += "\n\n" + text
        else:
            self.messages.append({"role": "user", "content": text, "parts": [part]})

    def received(self) -> frozenset[str]:
        """The bases of the messages this agent received as items (shown where they came)."""
        return frozenset(p.mem_id.base for m in self.messages for p in m.get("parts", ())
                         if not isinstance(p, str))

    def shown_messages(self) -> list[dict[str, Any]]:
        """Its messages as its next request shows them: each received item as it is now in its
        memory (a handle once evicted, the loaded version once loaded)."""
        if self.memory is None:
            return [{"role": m["role"], "content": m["content"]} for m in self.messages]
        memory = self.memory
        out = []
        for m in self.messages:
            parts = m.get("parts")
            if parts is None:
                out.append({"role": m["role"], "content": m["content"]})
                continue
            out.append({"role": m["role"], "content": "\n\n".join(
                p if isinstance(p, str) else memory.shown(p).render() for p in parts)})
        return out

    def answered(self, message: dict[str, Any]) -> None:
        """Keep the model's answer MESSAGE after the messages its call showed, before any told
        while it was out."""
        at = len(self.messages) if self.asked is None else min(self.asked, len(self.messages))
        self.messages.insert(at, message)
        self.asked = None

    def notice(self, text: str) -> None:
        """Add TEXT to this agent's transcript in the system role: who joined or left its panel,
        as a notice item of its memory (``notice.panel``) when it has one.

        Sent as a system message where the API has one mid-conversation (OpenAI's chat
        completions); the Messages API has a system role only before the first message,
        so there it is user text marked ``[system]`` (:func:`api_messages`)."""
        part: str | MemoryItem = self.memory.notice("panel", text) if self.memory is not None else text
        self.messages.append({"role": "system", "content": text, "parts": [part]})

    def summary(self) -> dict[str, Any]:
        """Type, template, state and cost, for the hub and `agent-list'."""
        return {"id": self.id, "type": self.type, "template": self.template, "name": self.name,
                "parent": self.parent,
                "state": AgentState.PAUSED if not self.resumed.is_set() and self.state.live else self.state,
                "ended": not self.state.live,  # Emacs reads this, not a list of the end states
                "steps": self.steps,
                "tokens": self.input_tokens + self.output_tokens, "cost": round(self.cost, 6)}
