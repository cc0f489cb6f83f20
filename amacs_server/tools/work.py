"""Brain tools for threads and skills, as the agent's elisp calls them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..arguments import Options, Strings, Text, checked
from ..persistence.events import PersonAddBuffer
from ..skills import SkillError
from ..threads import Thread, ThreadError
from .kit import ToolError, ToolHost, refusals

_refusals = refusals(ThreadError, SkillError)


class ThreadOptions(Options):
    """``agent-create-thread``'s options."""

    concern: str | None = None
    buffers: Strings | None = None


class CompleteOptions(Options):
    """``agent-complete-thread``'s options: what shows it is done (any data), and what was learned."""

    evidence: object = None
    learned: str | None = None


def _echo(rt: ToolHost, thread: Thread) -> dict[str, Any]:
    item = rt.mind.memory.put_thread(thread.to_content())
    rt.mind.sync_threads()
    return {"thread": thread.id, "mem_id": item.mem_id.format(), "version": item.version,
            "active": rt.mind.threads.active, "status": thread.status,
            "buffers": list(thread.buffers), "skills": list(thread.skills)}


@checked(1)
@_refusals
def thread_create(rt: ToolHost, thread_id: str, opts: ThreadOptions | None = None) -> dict[str, Any]:
    """Open a thread (ID first; :concern, :buffers); active if none was."""
    o = opts or ThreadOptions()
    return _echo(rt, rt.mind.threads.create(thread_id, o.concern, o.buffers, rt.mind.consciousness.current_tick))


@checked(1)
@_refusals
def thread_switch(rt: ToolHost, thread_id: str) -> dict[str, Any]:
    """Focus THREAD_ID; its buffers and skills load on the next tick."""
    return _echo(rt, rt.mind.threads.switch(thread_id))


@checked(1)
@_refusals
def thread_complete(rt: ToolHost, thread_id: str, opts: CompleteOptions | None = None) -> dict[str, Any]:
    """Close THREAD_ID with :evidence and :learned, kept and searchable in long-term memory."""
    o = opts or CompleteOptions()
    return _echo(rt, rt.mind.threads.complete(thread_id, o.evidence, o.learned))


@checked(1)
@_refusals
def thread_add_buffer(rt: ToolHost, thread_id: str, buffer: Text) -> dict[str, Any]:
    """Add BUFFER (a buffer name or a file) to THREAD_ID."""
    return _echo(rt, rt.mind.threads.add_buffer(thread_id, buffer))


PERSON_THREAD = "main"


@checked(1)
@_refusals
def person_add_buffer(rt: ToolHost, buffer: Text) -> dict[str, Any]:
    """The person adds BUFFER (`M-x amacs-add-buffer') to the active thread; with none
    active, to the thread ``main``, opened (or focused) for it."""
    if rt.mind.threads.active is None:
        if PERSON_THREAD in rt.mind.threads.open:
            _echo(rt, rt.mind.threads.switch(PERSON_THREAD))
        else:
            _echo(rt, rt.mind.threads.create(PERSON_THREAD, "what the person is working on", None,
                                        rt.mind.consciousness.current_tick))
    assert rt.mind.threads.active is not None
    answer = _echo(rt, rt.mind.threads.add_buffer(rt.mind.threads.active, buffer))
    rt.transcript.write(PersonAddBuffer(thread=rt.mind.threads.active, buffer=buffer))
    return answer


@checked(1)
@_refusals
def thread_remove_buffer(rt: ToolHost, thread_id: str, buffer: str) -> dict[str, Any]:
    """Remove BUFFER from THREAD_ID."""
    return _echo(rt, rt.mind.threads.remove_buffer(thread_id, buffer))


@checked(1)
@_refusals
def skills_list(rt: ToolHost) -> list[dict[str, str]]:
    """Every skill the agent may bind: name, description, kind."""
    return [s.summary() for s in rt.mind.skills.for_agents()]


@checked(1)
@_refusals
def skill_read(rt: ToolHost, skill: str) -> dict[str, str]:
    """SKILL's text, to read now: it needs no thread, and binds nothing."""
    found = rt.mind.skills.get(skill)
    if found.kind == "judge":
        raise ToolError(f"{skill!r} is a judge's rubric, which the research tools run, not a skill to read")
    return {**found.summary(), "text": found.body}


def _thread_for(rt: ToolHost, thread_id: str | None) -> str:
    tid = thread_id or rt.mind.threads.active
    if tid is None:
        raise ToolError("no thread is active: name one, or create one with agent-create-thread")
    return tid


@checked(1)
@_refusals
def skill_bind(rt: ToolHost, skill: str, thread_id: str | None = None) -> dict[str, Any]:
    """Bind SKILL to THREAD_ID (default: the active thread)."""
    found = rt.mind.skills.get(skill)
    if found.kind == "core":
        raise ToolError("the core skill is always loaded as the system prompt")
    return _echo(rt, rt.mind.threads.bind(_thread_for(rt, thread_id), found.name))


@checked(1)
@_refusals
def skill_unbind(rt: ToolHost, skill: str, thread_id: str | None = None) -> dict[str, Any]:
    """Unbind SKILL from THREAD_ID (default: the active thread)."""
    return _echo(rt, rt.mind.threads.unbind(_thread_for(rt, thread_id), skill))


# The agent's thread and skill tools, by the name Emacs calls them (tools/registry.py).
TOOLS: dict[str, Callable[..., Any]] = {
    "thread_create": thread_create, "thread_switch": thread_switch, "thread_complete": thread_complete,
    "thread_add_buffer": thread_add_buffer, "thread_remove_buffer": thread_remove_buffer,
    "skills_list": skills_list, "skill_read": skill_read, "skill_bind": skill_bind, "skill_unbind": skill_unbind,
}
