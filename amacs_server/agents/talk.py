"""TalkIds, events and waits (docs/ARCHITECTURE.md, Agent and World).

A TalkId names one message an agent sent; replies carry it back.  TalkIds are
monotonic per agent, wrap, and are never 0.  Events (User, Agent, Time, Hook)
travel on one bus with a bounded queue per agent: a full queue refuses at once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..errors import AmacsError

TALK_ID_MAX = 2**31 - 1
EVENT_QUEUE_SIZE = 100


class Overloaded(AmacsError, RuntimeError):
    """A bound was reached; the call fails at once instead of waiting."""


class EventType(StrEnum):
    """Where an event comes from."""

    USER = "User"
    AGENT = "Agent"
    TIME = "Time"
    HOOK = "Hook"


class TalkIds:
    """Per-agent TalkId source: 1, 2, ... TALK_ID_MAX, then 1 again; never 0."""

    def __init__(self, start: int = 0, limit: int = TALK_ID_MAX) -> None:
        self._last = start
        self._limit = limit

    @property
    def last(self) -> int:
        """The last TalkId given (0: none yet), from which a restored agent goes on."""
        return self._last

    def go_on(self, last: int) -> None:
        """Go on from LAST (a restored agent's last TalkId), as if it had just been given."""
        self._last = last % self._limit

    def next(self) -> int:
        """The next TalkId."""
        self._last = self._last % self._limit + 1
        return self._last


@dataclass(frozen=True)
class Event:
    """Something that happened to an agent."""

    type: EventType
    source: str  # who or what: an agent id, "user", "timer"
    content: Any
    talk_id: int | None = None
    seq: int = field(default_factory=itertools.count(1).__next__)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"type": self.type.value, "source": self.source, "talk_id": self.talk_id, "content": self.content}


class EventBus:
    """Bounded per-agent queues of events, with waits that wake on a TalkId's reply."""

    def __init__(self, size: int = EVENT_QUEUE_SIZE) -> None:
        self.size = size
        self._events: dict[str, deque[Event]] = {}
        self._signals: dict[str, asyncio.Event] = {}

    def _queue(self, agent_id: str) -> deque[Event]:
        return self._events.setdefault(agent_id, deque())

    def _signal(self, agent_id: str) -> asyncio.Event:
        return self._signals.setdefault(agent_id, asyncio.Event())

    def post(self, agent_id: str, event: Event, *, reserved: bool = False) -> None:
        """Deliver EVENT to AGENT_ID, or raise :class:`Overloaded` when its queue is full.

        A RESERVED event had its place taken when the work that yields it began, so
        it is always delivered: results are never lost.
        """
        queue = self._queue(agent_id)
        if not reserved and len(queue) >= self.size:
            raise Overloaded(f"the event queue of {agent_id} is full ({self.size}); try again later")
        queue.append(event)
        self._signal(agent_id).set()

    def pending(self, agent_id: str) -> int:
        """How many events wait for AGENT_ID."""
        return len(self._queue(agent_id))

    def peek(self, agent_id: str) -> list[Event]:
        """Every event waiting for AGENT_ID, oldest first, left waiting."""
        return list(self._queue(agent_id))

    def drain(self, agent_id: str) -> list[Event]:
        """Every event waiting for AGENT_ID, oldest first (clear on consume)."""
        queue = self._queue(agent_id)
        out = list(queue)
        queue.clear()
        return out

    async def wait_for(self, agent_id: str, talk_ids: frozenset[int], timeout: float) -> bool:
        """Wait until replies to all of TALK_IDS are queued for AGENT_ID; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        signal = self._signal(agent_id)
        while True:
            arrived = {e.talk_id for e in self._queue(agent_id) if e.type is not EventType.TIME}
            if talk_ids <= arrived:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            signal.clear()
            try:
                await asyncio.wait_for(signal.wait(), remaining)
            except TimeoutError:
                return False

    def forget(self, agent_id: str) -> None:
        """Drop AGENT_ID's queue."""
        self._events.pop(agent_id, None)
        self._signals.pop(agent_id, None)


@dataclass
class Wait:
    """An agent waiting for replies to some of its talks."""

    talk_ids: frozenset[int]
    timeout: float


def began_by(events: list[Event]) -> str | None:
    """What EVENTS are, in a line for the person (what began a tick no input of theirs began),
    each naming who: ``viewpoints pro and con commented``, ``task-1 (researcher) done``;
    None when there are none."""
    said: list[str] = []
    for event in events:
        content = event.content if isinstance(event.content, dict) else {}
        if event.type is EventType.TIME:
            line = "a wait timed out"
        elif event.type is EventType.USER:
            line = "the person answered"
        elif event.type is EventType.HOOK:
            line = "the log took a line" if event.source == "log" else f"a note from {event.source}"
        elif event.source == "consider":
            names = [str(c)[1:].partition("]")[0] for c in content.get("comments", ()) if str(c).startswith("[")]
            named = " and ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""
            line = f"viewpoint{'s' if len(names) > 1 else ''} {named} commented" if names else "a consider ended"
        elif "handle" in content:
            line = f"{content['handle']} ({content.get('template')}) {content.get('status')}"
        elif "message" in content:
            line = f"a message from {event.source}"
        else:
            line = f"{event.source} answered"
        if line not in said:
            said.append(line)
    return ", ".join(said) or None
