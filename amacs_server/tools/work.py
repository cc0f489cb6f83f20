"""Brain tools for threads and skills, as the agent's elisp calls them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..arguments import Options, Strings, Text, checked
from ..mind import Mind
from ..persistence.transcript import Transcript
from ..records import PersonAddBuffer
from ..skills import SkillError
from ..threads import Thread, ThreadError
from .kit import Takes, ToolError, refusals

TAKES: Takes = ("mind",)  # the threads and skills are the mind's
_refusals = refusals(ThreadError, SkillError)


class ThreadOptions(Options):
    """``agent-create-thread``'s options."""

    concern: str | None = None
    buffers: Strings | None = None


class CompleteOptions(Options):
    """``agent-complete-thread``'s options: what shows it is done (any data), and what was learned."""

    evidence: object = None
    learned: str | None = None


def _echo(mind: Mind, thread: Thread) -> dict[str, Any]:
    item = mind.memory.put_thread(thread.to_content())
    mind.sync_threads()
    return {"thread": thread.id, "mem_id": item.mem_id.format(), "version": item.version,
            "active": mind.threads.active, "status": thread.status,
            "buffers": list(thread.buffers), "skills": list(thread.skills)}


@checked(1)
@_refusals
def thread_create(mind: Mind, thread_id: str, opts: ThreadOptions | None = None) -> dict[str, Any]:
    """Open a thread (ID first; :concern, :buffers); active if none was."""
    o = opts or ThreadOptions()
    return _echo(mind, mind.threads.create(thread_id, o.concern, o.buffers, mind.consciousness.current_tick))


@checked(1)
@_refusals
def thread_switch(mind: Mind, thread_id: str) -> dict[str, Any]:
    """Focus THREAD_ID; its buffers and skills load on the next tick."""
    return _echo(mind, mind.threads.switch(thread_id))


@checked(1)
@_refusals
def thread_complete(mind: Mind, thread_id: str, opts: CompleteOptions | None = None) -> dict[str, Any]:
    """Close THREAD_ID with :evidence and :learned, kept and searchable in long-term memory."""
    o = opts or CompleteOptions()
    return _echo(mind, mind.threads.complete(thread_id, o.evidence, o.learned))


@checked(1)
@_refusals
def thread_add_buffer(mind: Mind, thread_id: str, buffer: Text) -> dict[str, Any]:
    """Add BUFFER (a buffer name or a file) to THREAD_ID."""
    return _echo(mind, mind.threads.add_buffer(thread_id, buffer))


PERSON_THREAD = "main"
PERSON_TAKES: Takes = ("mind", "transcript")  # person_add_buffer's: the transcript records it


@checked(len(PERSON_TAKES))
@_refusals
def person_add_buffer(mind: Mind, transcript: Transcript, buffer: Text) -> dict[str, Any]:
    """The person adds BUFFER (`M-x amacs-add-buffer') to the active thread; with none
    active, to the thread ``main``, opened (or focused) for it."""
    if mind.threads.active is None:
        if PERSON_THREAD in mind.threads.open:
            _echo(mind, mind.threads.switch(PERSON_THREAD))
        else:
            _echo(mind, mind.threads.create(PERSON_THREAD, "what the person is working on", None,
                                            mind.consciousness.current_tick))
    assert mind.threads.active is not None
    answer = _echo(mind, mind.threads.add_buffer(mind.threads.active, buffer))
    transcript.write(PersonAddBuffer(thread=mind.threads.active, buffer=buffer))
    return answer


@checked(1)
@_refusals
def thread_remove_buffer(mind: Mind, thread_id: str, buffer: str) -> dict[str, Any]:
    """Remove BUFFER from THREAD_ID."""
    return _echo(mind, mind.threads.remove_buffer(thread_id, buffer))


@checked(1)
@_refusals
def skills_list(mind: Mind) -> list[dict[str, str]]:
    """Every skill the agent may bind: name, description, kind."""
    return [s.summary() for s in mind.skills.for_agents()]


@checked(1)
@_refusals
def skill_read(mind: Mind, skill: str) -> dict[str, str]:
    """SKILL's text, to read now: it needs no thread, and binds nothing."""
    found = mind.skills.get(skill)
    if found.kind == "judge":
        raise ToolError(f"{skill!r} is a judge's rubric, which the research tools run, not a skill to read")
    return {**found.summary(), "text": found.body}


def _thread_for(mind: Mind, thread_id: str | None) -> str:
    tid = thread_id or mind.threads.active
    if tid is None:
        raise ToolError("no thread is active: name one, or create one with agent-create-thread")
    return tid


@checked(1)
@_refusals
def skill_bind(mind: Mind, skill: str, thread_id: str | None = None) -> dict[str, Any]:
    """Bind SKILL to THREAD_ID (default: the active thread)."""
    found = mind.skills.get(skill)
    if found.kind == "core":
        raise ToolError("the core skill is always loaded as the system prompt")
    return _echo(mind, mind.threads.bind(_thread_for(mind, thread_id), found.name))


@checked(1)
@_refusals
def skill_unbind(mind: Mind, skill: str, thread_id: str | None = None) -> dict[str, Any]:
    """Unbind SKILL from THREAD_ID (default: the active thread)."""
    return _echo(mind, mind.threads.unbind(_thread_for(mind, thread_id), skill))


# The agent's thread and skill tools, by the name Emacs calls them (tools/registry.py).
TOOLS: dict[str, Callable[..., Any]] = {
    "thread_create": thread_create, "thread_switch": thread_switch, "thread_complete": thread_complete,
    "thread_add_buffer": thread_add_buffer, "thread_remove_buffer": thread_remove_buffer,
    "skills_list": skills_list, "skill_read": skill_read, "skill_bind": skill_bind, "skill_unbind": skill_unbind,
}
