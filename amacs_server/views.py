"""What Emacs is shown of the runtime: the status at hello, the hub, a transcript.

The status and the hub read the parts through :class:`ViewHost`; a view of one
part takes that part.  Views own no state.
"""

from __future__ import annotations

import json
from typing import Protocol

from .errors import Refused
from .inference.pricing import dollars
from .ledger import Ledger
from .loop.host import RuntimeParts
from .memory.active import ActiveMemory, tick_of
from .memory.items import MemoryItem, long_text
from .memory.ltm import LongTermMemory
from .memory.memid import MemId, for_person
from .mind import Mind
from .persistence.chat_log import ChatLog, shorten
from .persistence.history import abandoned_futures, fork_origin
from .persistence.transcript import Transcript
from .records import ModelRequest, ModelResponse
from .state.consciousness import Budget


class ViewHost(RuntimeParts, Protocol):
    """The parts the views read (the Runtime holds them: runtime.py checks it): those the turn
    reads too, the run's id, and what start-up recovered from."""

    @property
    def run_id(self) -> str: ...

    @property
    def startup_notes(self) -> list[str]: ...  # what start-up recovered from, said at hello


def unkept_limit(ledger: Ledger) -> str | None:
    """The line saying that the limit the person gave (at start, kept in the home, or set before a
    switch of model) cannot be kept on the session's model, which nobody priced; None if it can."""
    unkept = ledger.budget_unkeepable() if ledger.person_limit is not None else None
    return None if unkept is None else f"Your budget limit of {dollars(ledger.person_limit or 0.0)} is not kept: {unkept}."


def status(rt: ViewHost) -> dict[str, object]:
    """A summary for Emacs at hello and on request."""
    c = rt.mind.consciousness
    # One line each, what start-up recovered from first; the shell prefixes ";; ".
    notes = [*rt.startup_notes, *([] if rt.slot.config.has_credentials else [rt.slot.config.missing_key_message()])]
    unkept = unkept_limit(rt.ledger)
    if unkept is not None:
        notes.append(unkept)
    return {
        "run_id": rt.run_id,
        "tick": c.current_tick,
        "mood": c.mood,
        "model": rt.slot.model,
        "backend": rt.slot.backend_name,
        "endpoint": rt.slot.endpoint(),
        "key_ok": rt.slot.config.has_credentials,
        "session": rt.ledger.session_tally.to_dict(),
        "spent": rt.ledger.spent(),
        "budget_limit": rt.ledger.limit(),
        "notice": "\n;; ".join(notes) or None,
        "home": str(rt.mind.home),
        "fork": fork_origin(rt.mind.home),  # a fork's header names what it is a fork of
        "interrupted": rt.mind.memory.last_chat_interrupted(),
        "recent": [_exchange(rt.mind, i) for i in rt.mind.memory.chat[-10:]],
    }


# The status the primary's turn records when the budget refused its input (loop.primary,
# finish_unanswered): tests/e2e/test_shell.py runs that refusal and the raise that offers it back.
BUDGET_REFUSED = "no reply: budget limit reached"


def budget_refused_input(memory: ActiveMemory) -> str | None:
    """The newest input, whole, when the budget refused it (no reply) and nothing came after it:
    the shell offers it again once the limit is raised."""
    if not memory.chat or memory.pending_tick is not None:
        return None
    content = memory.chat[-1].content
    human = content.get("human")
    if isinstance(human, str) and not content.get("agent") and content.get("status") == BUDGET_REFUSED:
        return human
    return None


def _exchange(mind: Mind, item: MemoryItem) -> dict[str, object]:
    """One exchange the shell shows at start: what was said, and from agent-chat.org the tick's
    eval (form, result or error, success) and the subagent tasks that ended under it (each
    before or after the reply), drawn as the live shell drew them."""
    tick = tick_of(item)
    out: dict[str, object] = {"tick": tick, "human": _shortened(item.content.get("human")),
                              "agent": _shortened(item.content.get("agent"))}
    if not item.content.get("agent") and item.content.get("status"):  # "no reply: interrupted by the person"
        out["status"] = item.content["status"]
    done = mind.chat_log.recent_evals.get(tick)
    if done is not None:
        out["eval"] = done.to_dict()
    tasks = mind.chat_log.recent_tasks.get(tick)
    if tasks:
        out["tasks"] = [task.to_dict() for task in tasks]
    return out


# The shell shows the last exchanges as a reminder; one that is longer is cut (a pasted file
# of 1 MB took Emacs ~0.2 s to read and insert at start-up).  C-c C-l has them whole.
RECENT_CHARS = 4000


def _shortened(text: object) -> object:
    if not isinstance(text, str):
        return text
    return shorten(text, RECENT_CHARS, "[… {more} more characters: the chat log (C-c C-l) has it all]")

# A past input is offered to pick (M-x amacs-rewind, amacs-fork) by its first words.
INPUT_CHARS = 100  # more than the picker shows (70 columns), so its label is the same
PAST_PAGE = 200  # the inputs the picker is given at once; older ones when the person asks


def past_inputs(chat_log: ChatLog, before: int | None = None, count: int = PAST_PAGE) -> dict[str, object]:
    """The inputs of the home's history as it stands, newest first: the COUNT newest of those
    before tick BEFORE (None: of all).  ``ticks``, and in the same order ``texts`` (each its first
    INPUT_CHARS characters) and ``times`` (when each was typed); ``more``: whether older ones
    are left (asked for with the oldest of these ticks as BEFORE).  Read from the end of
    agent-chat.org and its earlier months as far as the page takes, so the picker's prompt
    costs the same on a home of 20,000 ticks as on one of 1,000; a rewind cut the log back to
    the tick it went to: the abandoned future's inputs are not among them.  Flat lists: 5,000
    inputs encode for EPC in a seventh of the time a list of 5,000 tables takes."""
    page, more = chat_log.input_page(count, before)
    return {"ticks": [e.tick for e in page], "texts": [(e.human or "")[:INPUT_CHARS] for e in page],
            "times": [e.timestamp for e in page], "more": more}


def hub_state(rt: ViewHost, count: int = 10) -> dict[str, object]:
    """Everything the hub shows, read from the server's state."""
    c = rt.mind.consciousness
    threads = []
    for thread in sorted(rt.mind.threads.open.values(), key=lambda t: t.id != rt.mind.threads.active):
        threads.append({"id": thread.id, "concern": thread.concern,
                        "status": "active" if thread.id == rt.mind.threads.active else "pending",
                        "buffers": list(thread.buffers), "skills": list(thread.skills)})
    return {
        "identity": c.identity,
        "tick": c.current_tick,
        "mood": c.mood,
        "confidence": c.confidence,
        "model": rt.slot.model,
        "budget": {"cost_so_far": round(rt.ledger.spent(), 6), "budget_limit": rt.ledger.limit(),
                   "pressure": Budget(rt.ledger.spent(), rt.ledger.limit()).pressure},
        "session": rt.ledger.session_tally.to_dict(),
        "threads": threads,
        "monologue": [{"tick": tick_of(i), "text": i.content}
                      for i in rt.mind.memory.monologue[-count:]],
        "scratchpad": [{"tick": tick_of(i), "heading": i.content["heading"],
                        "thread": i.content["thread"]} for i in rt.mind.memory.last_notes(count)],
        "last_eval": {"tick": rt.mind.last_eval[0], **rt.mind.last_eval[1].to_dict()} if rt.mind.last_eval else None,
        "commits": [{"sha": sha, "subject": subject}  # a running turn does not wait for git
                    for sha, subject in rt.mind.commits.recent(count, wait=0 if rt.turns.turn_running else 2.0)],
        "abandoned": abandoned_futures(rt.mind.home),
        "home": str(rt.mind.home),
        "chat_log": str(rt.mind.chat_log.path),
        "agents": rt.world.everyone(),
        "mcp": rt.world.tools.status() if rt.world.tools is not None else [],
        "mcp_problems": list(rt.world.tools.problems) if rt.world.tools is not None else [],
        "memory": memory_summary(rt.mind, count),
    }


PREVIEW_CHARS = 80  # of an item's text, on its hub line


def _preview(item: MemoryItem) -> str:
    return " ".join(long_text(item)[1].split())[:PREVIEW_CHARS]


def memory_summary(mind: Mind, count: int) -> dict[str, object]:
    """The hub's Memory section: the COUNT newest of the primary's pinned items (name, kind,
    version, the start of its text), how many it pins, and how many versions long-term memory
    holds (one count over its smallest index: 2 ms at 106,000 versions, a home of 20,000 ticks).
    A home may pin hundreds (800 at 20,000 ticks of bench_flat's workload, whose hub then took
    1.5 s a draw): the others are found by search."""
    items = list(mind.memory.pinned.values())
    pinned = [{"mem_id": for_person(item.mem_id.format()), "name": item.mem_id.name, "kind": item.kind.value,
               "version": item.version, "preview": _preview(item)}
              for item in reversed(items[-count:])]
    return {"pinned": pinned, "pinned_count": len(items), "versions": mind.ltm.count()}


def memory_item(ltm: LongTermMemory, given: str, version: int | None = None) -> dict[str, object]:
    """One version of an item as the person reads it (the one GIVEN names, with its <EOT>s or
    without, VERSION, or the latest), with how many versions it has.  Read only: the agent's
    memory is not changed."""
    mem_id = MemId.given(given)
    item = ltm.get(mem_id if version is None else mem_id.at(version))
    return {"mem_id": for_person(item.mem_id.format()), "name": item.mem_id.name, "kind": item.kind.value,
            "version": item.version, "latest": ltm.latest_version(item.mem_id.base), "tier": item.tier.value,
            "tags": list(ltm.tags_of(item.mem_id.base)), "created_at_ms": item.created_at_ms,
            "text": for_person(long_text(item)[1])}


def memory_search(ltm: LongTermMemory, agent_brain: str, query: str, limit: int = 30) -> list[dict[str, object]]:
    """The person's search of long-term memory: the agent's search (one hit per item, its newest
    version that matches, :latest when a newer one does not), each address as the person reads it."""
    return [{**hit, "mem_id": for_person(str(hit["mem_id"])), "snippet": for_person(str(hit["snippet"]))}
            for hit in (h.to_dict() for h in ltm.search(query, limit=limit, agent_brain=agent_brain))]

def agent_transcript(transcript: Transcript, agent_id: str) -> str:
    """AGENT_ID's transcript of this session as readable text, for the hub."""
    events = transcript.lines(agent_id)
    if not events:
        raise Refused(f"no transcript for {agent_id!r} in this session")
    first = events[0]
    lines = [f"Transcript of {agent_id} ({first.agent_type}, template {first.template}, "
             f"parent {first.parent_id or '-'}), run {first.run_id}", ""]
    for e in events:
        event = e.event
        if isinstance(event, ModelRequest):
            messages = event.request["messages"]
            last = messages[-1]["content"] if messages else ""
            text = last if isinstance(last, str) else "\n".join(b.get("text", "") for b in last)
            body = f"(context: {len(messages)} message(s)) last:\n{text}"
        elif isinstance(event, ModelResponse):
            cost = "unpriced" if event.cost is None else f"${event.cost:.6f}"
            body = f"{event.raw}\n  [{event.usage['input_tokens']} in, {event.usage['output_tokens']} out, " \
                   f"{cost}, {event.latency_ms:.0f} ms]"
        else:
            body = json.dumps(event.data(), ensure_ascii=False, default=str)
        lines.append(f"#{e.seq} {e.kind}" + (f" (tick {e.tick})" if e.tick else ""))
        lines.extend("  " + line for line in body.splitlines())
    return for_person("\n".join(lines) + "\n")
