"""The World's post: who is owed what, and who waits for what (docs/ARCHITECTURE.md, Agent and World).

Each agent has a bounded event queue (:class:`~.talk.EventBus`) and its own
TalkIds.  A result to come (a task's answer, a consider's comments) takes its
place in the caller's queue when it is asked for, so a full queue refuses the
request at once and a result is never dropped when it arrives.  The talks an
agent's running eval made are the ones it may wait for after that eval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import faults
from .agent import AgentError
from .kinds import PRIMARY
from .talk import Event, EventBus, EventType, Overloaded, TalkIds, Wait


class Post:
    """Every agent's TalkIds and queue, the results each caller is owed, and each eval's talks and wait.

    RECORD writes an event posted to an agent into that agent's transcript; WAKE starts the
    primary's turn for an event posted to it."""

    def __init__(self, size: int, wait_timeout: float, record: Callable[[str, Event], None],
                 wake: Callable[[], None]) -> None:
        self.bus = EventBus(size)
        self.wait_timeout = wait_timeout  # default for agent-wait-for
        self._record, self._wake = record, wake
        self._talk_ids: dict[str, TalkIds] = {}
        self._outstanding: dict[str, int] = {}  # results each caller is owed
        self._eval_talks: dict[str, set[int]] = {}  # talks made in each agent's running eval
        self._waits: dict[str, Wait] = {}

    def open(self, agent_id: str, talk_ids: TalkIds) -> None:
        """AGENT_ID may talk, numbering its talks with TALK_IDS (its record's own)."""
        self._talk_ids[agent_id] = talk_ids

    def forget(self, agent_id: str) -> None:
        """AGENT_ID ended: its queue and its bookkeeping go."""
        self.bus.forget(agent_id)
        for table in (self._outstanding, self._waits, self._eval_talks, self._talk_ids):
            table.pop(agent_id, None)

    def talk(self, caller: str, eval_id: int | None) -> int:
        """A new TalkId of CALLER's, counted as its running eval's when it is made in one."""
        talk_id = self._talk_ids.setdefault(caller, TalkIds()).next()
        if eval_id is not None and caller in self._eval_talks:
            self._eval_talks[caller].add(talk_id)
        return talk_id

    # -- results to come, and events --------------------------------------------------------

    def reserve(self, caller: str) -> None:
        """Take a place in CALLER's queue for a result to come, or refuse at once."""
        owed = self._outstanding.get(caller, 0)
        if self.bus.pending(caller) + owed >= self.bus.size:
            raise Overloaded(f"the event queue of {caller} is full ({self.bus.size} events waiting or owed); "
                             "let results arrive first")
        self._outstanding[caller] = owed + 1

    def release(self, caller: str) -> None:
        """Give back a place :meth:`reserve` took for a result that will not come."""
        self._outstanding[caller] -= 1

    def deliver_result(self, to: str, event: Event, *, wake: bool = True) -> None:
        """Deliver a result whose place was reserved: it is never dropped.

        Without WAKE (an interrupted task's result) it waits for the primary's next turn."""
        self._outstanding[to] = max(0, self._outstanding.get(to, 0) - 1)
        self.bus.post(to, event, reserved=True)
        self._record(to, event)
        faults.point("talk.delivered")
        if to == PRIMARY and wake:
            self._wake()

    def deliver(self, to: str, event: Event, *, reserved: bool = False) -> None:
        """Post EVENT to TO; a full queue raises :class:`Overloaded` for the sender (never a silent drop)."""
        self.bus.post(to, event, reserved=reserved)
        self._record(to, event)
        faults.point("talk.delivered")
        if to == PRIMARY:
            self._wake()

    # -- an eval's talks, and the wait it registers ---------------------------------------------

    def begin_eval(self, agent_id: str) -> None:
        """AGENT_ID starts an eval: talks from now on belong to it."""
        self._eval_talks[agent_id] = set()
        self._waits.pop(agent_id, None)

    def end_eval(self, agent_id: str) -> Wait | None:
        """The eval is over: forget its talks; return the wait it registered, if any."""
        self._eval_talks.pop(agent_id, None)
        return self._waits.pop(agent_id, None)

    def wait_for(self, caller: str, eval_id: int | None, talk_ids: list[int], timeout: float | None) -> dict[str, Any]:
        """After this eval, CALLER sleeps until replies to all TALK_IDS arrive (or TIMEOUT seconds)."""
        made = self._eval_talks.get(caller, set()) if eval_id is not None else set()
        if not made:
            raise AgentError("agent-wait-for needs an agent-talk-* (or agent-task/agent-consider) call "
                             "earlier in the same eval")
        foreign = [i for i in talk_ids if i not in made]
        if foreign:
            raise AgentError(f"TalkId(s) {foreign} were not made in this eval; this eval made {sorted(made)}")
        seconds = self.wait_timeout if timeout is None else timeout
        self._waits[caller] = Wait(frozenset(talk_ids), seconds)
        return {"waiting_for": talk_ids, "timeout": seconds}

    async def sleep_until(self, agent_id: str, wait: Wait) -> None:
        """Sleep until the reply arrives or the wait times out (a Time event)."""
        if not await self.bus.wait_for(agent_id, wait.talk_ids, wait.timeout):
            # The wait's own answer: always delivered (one event past the bound at most).
            self.deliver(agent_id, Event(EventType.TIME, "timer",
                                         {"timed_out": sorted(wait.talk_ids), "after_s": wait.timeout}),
                         reserved=True)
