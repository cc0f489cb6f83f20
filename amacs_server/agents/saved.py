"""A live subagent as the tick state records it (persistence.history), and made again from it.

What a subagent's next request is built from: its record (id, type, template, parent,
rights, model), its messages (each received item by its MemId: the request shows it as
its RAM holds it then), its RAM beyond LTM's active table, the items its requests last
showed, its counters, its TalkIds and the events waiting in its queue.  A subagent at
work at the tick cannot be resumed mid-run (its run is a coroutine: the step, the eval
and the wait under way are not data): it comes back idle with its messages up to its
last model answer, and a task, whose run is its whole life, comes back interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..memory.active import ActiveMemory, MemoryRefused
from ..memory.memid import MemId
from ..persistence.transcript import written_since
from .agent import Agent
from .kinds import AgentState, AgentType, Ending
from .talk import Event, EventType, TalkIds

if TYPE_CHECKING:
    from ..memory.ltm import LongTermMemory


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
    for line in written_since(folder, since):
        data = line.get("data")
        if line.get("event") != "agent_start" or not isinstance(data, dict) or data.get("name") is not None:
            continue
        kind, _, number = str(line.get("agent_id")).rpartition("-")
        if kind in kinds and number.isdigit():
            top = max(top, int(number))
    return top
