"""A live subagent as the tick state records it (persistence.history), and made again from it.

What a subagent's next request is built from: its record (id, type, template, parent,
rights, model), its messages (each received item by its MemId: the request shows it as
its RAM holds it then), its RAM beyond LTM's active table, the items its requests last
showed, its counters, its TalkIds and the events waiting in its queue.  A subagent at
work at the tick cannot be resumed mid-run (its run is a coroutine: the step, the eval
and the wait under way are not data): it comes back idle with its messages up to its
last model answer, and a task, whose run is its whole life, comes back interrupted.
:func:`restore` makes the World's subagents again from a home's last tick state, at a start
and after a rewind.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import AmacsError
from ..memory.active import ActiveMemory, MemoryRefused
from ..memory.memid import MemId
from ..persistence.history import read_state
from ..persistence.transcript import written_since
from ..records import AgentStart, parse
from .agent import Agent
from .kinds import AgentState, AgentType, Ending
from .talk import Event, EventType, TalkIds

if TYPE_CHECKING:
    from ..memory.ltm import LongTermMemory

log = logging.getLogger("amacs")


def agent_state(agent: Agent, queued: list[Event]) -> dict[str, Any]:
    """AGENT (live) as JSON, with the events QUEUED for it."""
    messages = []
    for m in agent.messages:
        saved: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if "parts" in m:
            saved["parts"] = [p if isinstance(p, str) else {"item": p.mem_id.format()} for p in m["parts"]]
        messages.append(saved)
    return {"id": agent.id, "type": agent.type, "template": agent.template, "parent": agent.parent,
            "depth": agent.depth, "name": agent.name, "allowed": sorted(agent.allowed), "tools": list(agent.tools),
            "request_input": agent.request_input, "model": agent.model, "state": agent.state,
            "paused": not agent.resumed.is_set(), "status": agent.status, "steps": agent.steps,
            "input_tokens": agent.input_tokens, "output_tokens": agent.output_tokens, "cost": agent.cost,
            "budget_told": agent.budget_told, "talk_id": agent.talk_ids.last, "messages": messages,
            "memory": agent.memory.subagent_state() if agent.memory is not None else None,
            "memory_shown": dict(agent.memory_shown),
            "queue": [{"type": e.type, "source": e.source, "content": e.content, "talk_id": e.talk_id}
                      for e in queued]}


def agent_from_state(data: dict[str, Any], ltm: LongTermMemory, brain_agent: str) -> tuple[Agent, list[Event]]:
    """The subagent DATA (:func:`agent_state`) recorded, idle (or interrupted, a task at work),
    its RAM read back from LTM (BRAIN_AGENT names its brains), and its queued events."""
    def part(p: Any) -> Any:
        return p if isinstance(p, str) else ltm.get(MemId.parse(p["item"]))

    messages = []
    for m in data["messages"]:
        restored: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if "parts" in m:
            restored["parts"] = [part(p) for p in m["parts"]]
        messages.append(restored)
    state = AgentState(data["state"])
    if state is AgentState.RUNNING:
        state = AgentState.INTERRUPTED if data["type"] == AgentType.TASK else AgentState.IDLE
    agent = Agent(id=data["id"], type=data["type"], template=data["template"], parent=data["parent"],
                  depth=int(data["depth"]), name=data["name"], allowed=frozenset(data["allowed"]),
                  tools=tuple(data["tools"]), request_input=bool(data["request_input"]), model=data["model"],
                  messages=messages, state=state, steps=int(data["steps"]),
                  input_tokens=int(data["input_tokens"]), output_tokens=int(data["output_tokens"]),
                  cost=float(data["cost"]), talk_ids=TalkIds(int(data["talk_id"])),
                  status=Ending(data["status"]) if data["status"] else None,
                  budget_told=bool(data["budget_told"]), memory_shown=dict(data["memory_shown"]))
    if data["paused"]:
        agent.resumed.clear()
    if data["memory"] is not None:
        try:
            agent.memory = ActiveMemory.restored_subagent(ltm, brain_agent, agent.id, data["memory"])
        except MemoryRefused:
            agent.memory = None
    queued = [Event(EventType(e["type"]), e["source"], e["content"], e["talk_id"]) for e in data["queue"]]
    return agent, queued


def numbered_since(folder: Path, since: float) -> int:
    """The highest number an unnamed subagent was given (``task-3``) in the lines of FOLDER's
    transcripts written after SINCE (the restored tick state's end): ids given in a tick whose
    state was never saved (the server was killed in it), which that state's counter does not
    count.  0 when none was."""
    kinds = {t.value for t in AgentType}
    top = 0
    for written in written_since(folder, since):
        try:
            line = parse(written)
        except (ValueError, TypeError, KeyError, AttributeError):  # a kind this version does not know
            continue
        if not isinstance(line.event, AgentStart) or line.event.name is not None:
            continue
        kind, _, number = line.agent_id.rpartition("-")
        if kind in kinds and number.isdigit():
            top = max(top, int(number))
    return top


class Restored(Protocol):
    """What of the World a restore sets (agents/world.py): its subagents, made again from a tick
    state's record of them, and how far their ids were numbered."""

    numbered: int

    def restore_subagents(self, data: dict[str, Any]) -> list[str]: ...


def restore(world: Restored, home: Path, tick: int) -> str | None:
    """The live subagents of HOME's last tick state, made again in WORLD: none when the state is
    older than the org files (which are at TICK).  Returns what the person is told when some were
    at work at the tick (they come back idle, a task interrupted, not mid-run), were dropped with
    an older state, or could not be read; None when there is nothing to tell."""
    state = read_state(home)
    older: dict[str, Any] | None = None
    if state is not None and state.get("tick") != tick:
        older, state = state, None  # a crash between the org files and the tick state
    state = state or {}
    agents = state.get("agents")
    try:
        stopped = world.restore_subagents(agents if isinstance(agents, dict) else _numbering(older))
        since = (older or state).get("ended_at", 0.0)  # ids given after it are not given again
        world.numbered = max(world.numbered, numbered_since(home / "transcripts", since))
        if older is not None:
            return _dropped(older, tick)
    except (AmacsError, KeyError, TypeError, ValueError) as err:
        log.warning("the tick state's subagents cannot be read (%r): none restored", err)
        world.restore_subagents({})
        return f"the subagents of tick {state.get('tick')} could not be restored ({err}); none is live"
    if not stopped:
        return None
    return (f"at work at tick {state['tick']}, not resumed: {', '.join(stopped)} (back idle with what "
            "they were told; a task: interrupted)")


def _numbering(older: dict[str, Any] | None) -> dict[str, Any]:
    """What of an OLDER tick state's subagents goes on when none is restored from it: how far
    their ids and the primary's TalkIds were numbered (ids go on across restarts, never again)."""
    agents = older.get("agents") if older is not None else None
    if not isinstance(agents, dict):
        return {}
    return {k: agents[k] for k in ("numbered", "primary_talk_id") if isinstance(agents.get(k), int)}


def _dropped(older: dict[str, Any], tick: int) -> str | None:
    """The line that names the subagents an OLDER tick state held live, not restored because the
    server stopped before it saved tick TICK's state; None when it held none."""
    agents = older.get("agents")
    live = agents.get("agents") if isinstance(agents, dict) else None
    ids = [str(a.get("id")) for a in live if isinstance(a, dict)] if isinstance(live, list) else []
    if not ids:
        return None
    return (f"live at tick {older.get('tick')}, not restored: {', '.join(ids)} (the server stopped before it "
            f"saved tick {tick}'s state); they have ended")
